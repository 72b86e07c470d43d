// Softmax cross-entropy with label smoothing against hand-computed values and finite
// differences, and the top-1 / top-5 counts.
#include "test_layers_util.h"

#include <accord/error.h>

#include <cmath>
#include <limits>

namespace accord::nn::test {
namespace {

// logits [[1, 2, 3], [0, 0, 0]], labels [2, 1].
// Row 0: logsumexp = log(e + e^2 + e^3) = 3.4076059644; row 1: log 3 = 1.0986122887.
// Without smoothing: ((3.4076059644 - 3) + 1.0986122887) / 2 = 0.7531091266.
// With s = 0.1 the target is q = 0.9 onehot + 0.1 / 3: row 0 loses
// sum q z = 0.9 * 3 + (0.1 / 3) * 6 = 2.9, so (0.5076059644 + 1.0986122887) / 2.
TEST_CASE("softmax cross-entropy equals the hand computation", "[layers][loss]") {
  Tensor logits{1, 2, 3, 0, 0, 0};
  std::vector<int32_t> labels{2, 1};
  CHECK(softmax_xent(logits.data(), labels.data(), nullptr, 2, 3, 0.0f) ==
        Approx(0.7531091266).epsilon(1e-6));
  CHECK(softmax_xent(logits.data(), labels.data(), nullptr, 2, 3, 0.1f) ==
        Approx(0.8031091266).epsilon(1e-6));
  Tensor d(6);
  softmax_xent(logits.data(), labels.data(), d.data(), 2, 3, 0.1f);
  // Row 1: softmax = 1/3 each, q = (1/30, 0.9 + 1/30, 1/30); d = (p - q) / 2.
  CHECK(d[3] == Approx((1.0 / 3 - 1.0 / 30) / 2));
  CHECK(d[4] == Approx((1.0 / 3 - 0.9 - 1.0 / 30) / 2));
  CHECK(d[0] + d[1] + d[2] == Approx(0).margin(1e-7));
}

TEST_CASE("softmax cross-entropy gradient equals finite differences", "[layers][loss]") {
  const int N = 4, C = 7;
  std::mt19937_64 rng(1);
  Tensor logits = randomTensor(N * C, rng, -3.0f, 3.0f), d(N * C);
  std::vector<int32_t> labels{0, 6, 3, 3};
  for (float s : {0.0f, 0.1f}) {
    softmax_xent(logits.data(), labels.data(), d.data(), N, C, s);
    checkGradient(
        "dlogits", logits, d,
        [&] {
          return static_cast<double>(softmax_xent(logits.data(), labels.data(), nullptr, N, C, s));
        },
        1e-2, 1e-4, 1e-2);
    // In place on the logits gives the same gradient.
    Tensor in_place = logits;
    softmax_xent(in_place.data(), labels.data(), in_place.data(), N, C, s);
    CHECK(in_place == d);
  }
}

TEST_CASE("softmax cross-entropy is stable for large logits", "[layers][loss]") {
  Tensor logits{1000, 0, -1000, 500};
  std::vector<int32_t> labels{0};
  Tensor d(4);
  float loss = softmax_xent(logits.data(), labels.data(), d.data(), 1, 4, 0.0f);
  CHECK(loss == Approx(0).margin(1e-6));
  for (float v : d) CHECK(std::isfinite(v));
}

TEST_CASE("softmax cross-entropy rejects bad labels", "[layers][loss]") {
  Tensor logits(6);
  std::vector<int32_t> labels{0, 3};
  CHECK_THROWS_AS(softmax_xent(logits.data(), labels.data(), nullptr, 2, 3, 0.1f), InvalidArgument);
  labels = {0, -1};
  CHECK_THROWS_AS(topk_correct(logits.data(), labels.data(), 2, 3), InvalidArgument);
}

TEST_CASE("top-1 and top-5 counts", "[layers][loss]") {
  // 7 classes; the label ranks 1st, 3rd, 6th and tied-for-1st.
  Tensor logits{
      9, 1, 2, 3, 4, 5, 6,  // label 0: top-1
      1, 2, 7, 8, 3, 4, 5,  // label 4 (3): ranked 5th -> top-5, not top-1
      6, 5, 4, 3, 2, 1, 0,  // label 5 (1): ranked 6th -> neither
      4, 4, 1, 1, 1, 1, 1,  // label 1, tied with class 0: ties count against
  };
  std::vector<int32_t> labels{0, 4, 5, 1};
  TopK t = topk_correct(logits.data(), labels.data(), 4, 7);
  CHECK(t.top1 == 1);
  CHECK(t.top5 == 3);
  // With fewer than 5 classes "top-5" means top-C: always right.
  Tensor small{0, 1, 2, 3, 2, 1};
  std::vector<int32_t> small_labels{0, 0};
  TopK s = topk_correct(small.data(), small_labels.data(), 2, 3);
  CHECK(s.top1 == 1);  // row 1 (3, 2, 1): label 0 is the max
  CHECK(s.top5 == 2);
}

TEST_CASE("rows with a NaN logit are never counted correct", "[layers][loss]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  Tensor logits{
      nan, 1,   2,    // label 0 is NaN
      9,   nan, 2,    // label 0 beats 2, another logit is NaN
      nan, nan, nan,  // a diverged model
      inf, 1,   2,    // +inf is an ordinary winner
  };
  std::vector<int32_t> labels{0, 0, 1, 0};
  TopK t = topk_correct(logits.data(), labels.data(), 4, 3);
  CHECK(t.top1 == 1);  // the last row only
  CHECK(t.top5 == 1);  // fewer than 5 classes: top-C, still not the NaN rows
}

}  // namespace
}  // namespace accord::nn::test
