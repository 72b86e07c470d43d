// Softmax cross-entropy with label smoothing, and top-k accuracy counts. Hand loops:
// the (N, classes) logits are tiny next to a ResNet's activations. Rows run in parallel
// on oneTBB; each row's loss goes to its own slot and the slots are summed in order,
// so the loss is bitwise reproducible whatever the thread count.
//
// With q = (1 - s) onehot(label) + s / C the smoothed target and z a row of logits,
//   loss = -sum_j q_j log softmax(z)_j = logsumexp(z) - (1 - s) z_label - (s / C) sum_j z_j
//   dloss/dz = softmax(z) - q, divided by N for the batch mean.
#include "nn/backend.h"
#include "nn/layers.h"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace accord::nn {

namespace {

void checkLabels(const int32_t* labels, int N, int C, const char* fn) {
  if (N <= 0 || C <= 0) throw InvalidArgument(detail::key(fn, ": invalid shape N", N, "C", C));
  for (int i = 0; i < N; ++i)
    if (labels[i] < 0 || labels[i] >= C)
      throw InvalidArgument(
          detail::key(fn, ": label", labels[i], "of row", i, "is outside [0, C) with C =", C));
}

// One row: returns its loss and, if d is not nullptr, writes (softmax - q) * scale.
double rowLoss(const float* z, int label, float* d, int C, float smoothing, float scale) {
  float zmax = *std::max_element(z, z + C);
  double sumexp = 0.0, sumz = 0.0;
  for (int j = 0; j < C; ++j) {
    sumexp += std::exp(static_cast<double>(z[j] - zmax));
    sumz += z[j];
  }
  double lse = zmax + std::log(sumexp);
  double loss = lse - (1.0 - smoothing) * z[label] - smoothing / C * sumz;
  if (d) {
    float off = smoothing / C;
    for (int j = 0; j < C; ++j) {  // z[j] is read before d[j] is written (d may be z)
      double p = std::exp(static_cast<double>(z[j]) - lse);
      double q = off + (j == label ? 1.0 - smoothing : 0.0);
      d[j] = static_cast<float>((p - q) * scale);
    }
  }
  return loss;
}

}  // namespace

float softmax_xent(const float* logits, const int32_t* labels, float* dlogits, int N, int C,
                   float smoothing) {
  checkLabels(labels, N, C, "softmax_xent");
  if (!(smoothing >= 0.0f && smoothing < 1.0f))
    throw InvalidArgument(
        detail::key("softmax_xent: label smoothing", smoothing, "is outside [0, 1)"));
  std::vector<double> losses(N);
  float scale = 1.0f / N;
  tbb::parallel_for(tbb::blocked_range<int>(0, N), [&](const tbb::blocked_range<int>& r) {
    for (int i = r.begin(); i < r.end(); ++i) {
      size_t off = static_cast<size_t>(i) * C;
      losses[i] =
          rowLoss(logits + off, labels[i], dlogits ? dlogits + off : nullptr, C, smoothing, scale);
    }
  });
  double total = 0.0;
  for (double l : losses) total += l;
  return static_cast<float>(total / N);
}

TopK topk_correct(const float* logits, const int32_t* labels, int N, int C) {
  checkLabels(labels, N, C, "topk_correct");
  int k5 = std::min(5, C);
  TopK result;
  for (int i = 0; i < N; ++i) {
    const float* z = logits + static_cast<size_t>(i) * C;
    float target = z[labels[i]];
    int ahead = 0;  // other logits >= the label's: ties count against
    bool nan = false;
    for (int j = 0; j < C; ++j) {
      ahead += (j != labels[i] && z[j] >= target);
      nan = nan || std::isnan(z[j]);
    }
    // Every comparison with NaN is false, which would put the label first: a diverged
    // model would score 100%. A row with a NaN logit predicts nothing.
    if (nan) continue;
    result.top1 += ahead < 1;
    result.top5 += ahead < k5;
  }
  return result;
}

}  // namespace accord::nn
