// The small ResNet-18 the GPU model tests train: width 1/4, 16x16 inputs, 10 classes,
// batch 8.
#pragma once

#include "model.h"

namespace accord::test {

inline resnet::ModelConfig smallConfig() {
  resnet::ModelConfig cfg;
  cfg.depth = 18, cfg.classes = 10, cfg.in_channels = 3, cfg.cifar_stem = true;
  cfg.width = 0.25, cfg.max_batch = 8, cfg.image_size = 16;
  return cfg;
}

}  // namespace accord::test
