// Running a model's passes on a GPU (--device cuda).
//
// The host Model stays the model the rest of the trainer sees: the optimizer, the
// checkpoints, the broadcasts and the BN averaging all keep working on its host
// arenas. useDevice() gives it a device copy with the same layout (the same code lays
// it out, in arenas of device memory) and the GPU's layer table; forward, loss,
// accuracy and backward then run there:
//   forward:   parameters, BN statistics and the batch go up; BN statistics come back
//   backward:  each layer's gradients come down into the host model's gradient arena
//              right after that layer's backward, and go on to its sink from there
// So gradients reach the runtime through host buffers, and every step uploads the
// parameters the host optimizer updated: simple and correct first; keeping parameters,
// the optimizer (nn::cuda::FusedSgd) and NCCL reductions on the GPU comes next. The
// host arenas that travel (parameters, gradients, BN statistics, the input batch) are
// page-locked for the time the model is on the GPU, so those copies run at the
// bus's speed.
#pragma once

#include "model.h"

#include <string>

namespace accord::resnet {

// Moves m's passes to `device`: "cpu" does nothing, "cuda" uses GPU local_rank modulo
// the GPUs present. `precision`: "fp32", or "tf32" (cuda only: tensor cores on float32
// data). Throws InvalidArgument for another name, "cuda" in a build without cuDNN, or
// tf32 on the CPU. Call after buildModel().
void useDevice(Model& m, const std::string& device, int local_rank,
               const std::string& precision = "fp32");

// The passes on m.device (model_pass.cc forwards to these when it is set).
void deviceForward(Model& m, int N);
float deviceLoss(Model& m, const int32_t* labels, int N, float smoothing, bool with_grad);
nn::TopK deviceAccuracy(Model& m, const int32_t* labels, int N);
void deviceBackward(Model& m, int N);

}  // namespace accord::resnet
