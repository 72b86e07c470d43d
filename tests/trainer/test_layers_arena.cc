// Arena: the planning pass counts what the real pass takes, pieces are 64-byte aligned
// and zeroed, and running out (a take() sequence that differs from the plan) throws.
#include "nn/layers.h"

#include <accord/error.h>

#include <catch2/catch.hpp>

#include <cstdint>

namespace accord::nn {
namespace {

TEST_CASE("arena plans, then hands out aligned zeroed pieces", "[layers][arena]") {
  Arena a;
  Conv2d conv{3, 8, 3, 1, 1, true};
  Arena grads;
  conv2d_bind(conv, a, grads);
  CHECK(conv.w == nullptr);
  float* extra = a.take(5);
  CHECK(extra == nullptr);
  size_t planned = a.used;
  CHECK(planned >= conv.num_params() + 5);
  a.allocate();
  grads.allocate();
  conv2d_bind(conv, a, grads);
  float* e = a.take(5);
  CHECK(a.used == planned);
  for (float* p : {conv.w, conv.b, conv.dw, conv.db, e}) {
    REQUIRE(p != nullptr);
    CHECK(reinterpret_cast<uintptr_t>(p) % 64 == 0);
  }
  CHECK(conv.b >= conv.w + 8 * 3 * 9);
  CHECK(conv.w[0] == 0.0f);
  CHECK(e[4] == 0.0f);
  CHECK_THROWS_AS(a.take(1), Error);
  a.reset();
  CHECK(a.take(1) == conv.w);
}

}  // namespace
}  // namespace accord::nn
