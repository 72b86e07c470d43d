// One of accord-fusion-probe's questions (fusion_measure.cc's block-end rows): can
// --fuse-residual's batch norms, whose statistics our own pass summed, take cuDNN's Ex
// backward where it beats ours (the last stage's 2048 channels of 7x7), although no Ex
// forward made the reserve space that call reads?
#pragma once

#include "nn/layers.h"

#include <functional>
#include <string>

namespace accord::resnet::probe {

// cuDNN's Ex backward (persistent mode, batch norm alone) of the training batch norm
// `bn` on 16-bit NHWC x and dy (N, bn.C, H, H), from bn's saved mean and inverse
// deviation as launchBnStatistics left them and a zeroed reserve space, into dx;
// against our backward's dx_ours, dgamma and dbeta (bn.dgamma, bn.dbeta) from the same
// statistics. Sets *ms to its time by `time` (negative where cuDNN refuses it) and
// returns the row's note: how far its results are from ours, or why it did not run.
std::string exBackwardOnOurStatistics(
    const nn::BatchNorm2d& bn, const float* x, const float* dy, float* dx, const float* dx_ours,
    int N, int H, const std::function<double(const std::function<void()>&)>& time, double* ms);

}  // namespace accord::resnet::probe
