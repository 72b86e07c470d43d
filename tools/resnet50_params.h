// The parameter tensors of torchvision's ResNet-50, for the benchmark's gradient set.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace accord_bench {

struct Param {
  std::string name;
  std::vector<std::int64_t> shape;
  std::int64_t numel() const {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
};

// torchvision's resnet50().named_parameters(), in order: 161 tensors, 25,557,032 values.
std::vector<Param> resnet50Params();

}  // namespace accord_bench
