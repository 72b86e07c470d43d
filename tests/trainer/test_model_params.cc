// Parameter counts of every depth equal torchvision's at 1000 classes, and the
// small-model knobs (classes, input channels, stem, width) change them as expected.
#include "model.h"

#include <accord/error.h>
#include <catch2/catch.hpp>

using namespace accord::resnet;

namespace {

std::size_t countFor(int depth, int classes = 1000, int in = 3, bool cifar = false,
                     double width = 1.0) {
  ModelConfig cfg;
  cfg.depth = depth;
  cfg.classes = classes;
  cfg.in_channels = in;
  cfg.cifar_stem = cifar;
  cfg.width = width;
  cfg.max_batch = 1;
  cfg.image_size = 32;  // keeps the activation arena small; counts do not depend on it
  Model m;
  buildModel(m, cfg);
  return parameterCount(m);
}

}  // namespace

TEST_CASE("parameter counts equal torchvision's at 1000 classes", "[model]") {
  CHECK(countFor(18) == 11689512);
  CHECK(countFor(34) == 21797672);
  CHECK(countFor(50) == 25557032);
  CHECK(countFor(101) == 44549160);
  CHECK(countFor(152) == 60192808);
}

TEST_CASE("classes, input channels and the cifar stem change the count as expected", "[model]") {
  const std::size_t base = countFor(18);
  // fc: 512 inputs per class plus a bias.
  CHECK(countFor(18, 10) == base - 990 * 513);
  // conv1 7x7: 64 * 7 * 7 weights per input channel.
  CHECK(countFor(18, 1000, 1) == base - 2 * 64 * 49);
  // The cifar stem swaps the 7x7 conv for a 3x3 one.
  CHECK(countFor(18, 1000, 3, true) == base - 64 * 3 * (49 - 9));
  // Width 0.5 roughly quarters the conv weights.
  const std::size_t half = countFor(18, 1000, 3, false, 0.5);
  CHECK(half < base / 3);
  CHECK(half > base / 5);
}

TEST_CASE("state_dict names and order follow torchvision", "[model]") {
  ModelConfig cfg;
  cfg.depth = 50;
  cfg.max_batch = 1;
  cfg.image_size = 32;
  Model m;
  buildModel(m, cfg);
  const auto params = parameterList(m);
  REQUIRE(params.size() == 161);  // len(list(torchvision.models.resnet50().parameters()))
  CHECK(params[0].name == "conv1.weight");
  CHECK(params[1].name == "bn1.weight");
  CHECK(params[3].name == "layer1.0.conv1.weight");
  CHECK(params.back().name == "fc.bias");
  bool found_down = false;
  for (const auto& p : params) found_down |= p.name == "layer2.0.downsample.1.bias";
  CHECK(found_down);
  CHECK(bufferList(m).size() == 2 * 53);  // 53 batch norms in ResNet-50
}

TEST_CASE("unsupported depth and sizes are rejected", "[model]") {
  ModelConfig cfg;
  cfg.depth = 20;
  Model m;
  CHECK_THROWS_AS(buildModel(m, cfg), accord::InvalidArgument);
  ModelConfig tiny;
  tiny.image_size = 16;
  Model m2;
  CHECK_THROWS_AS(buildModel(m2, tiny), accord::InvalidArgument);
}

// Activations for more images than any host's address space holds: a clear error that
// names the batch and the memory, not a crash or an arena's bare refusal.
TEST_CASE("a batch whose activations cannot be allocated is refused by name", "[model]") {
  ModelConfig cfg;
  cfg.classes = 10;
  cfg.in_channels = 1;
  cfg.cifar_stem = true;
  cfg.image_size = 28;
  cfg.width = 0.25;
  cfg.max_batch = 1 << 30;
  Model m;
  try {
    buildModel(m, cfg);
    FAIL("a batch of 2^30 images was allocated");
  } catch (const accord::InvalidArgument& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("a batch of 1073741824 images need") != std::string::npos);
    CHECK(what.find("GiB of host memory") != std::string::npos);
    CHECK(what.find("use a smaller batch") != std::string::npos);
  }
}

// The GPU optimizer (nn::cuda::FusedSgd over the whole arena) reads each parameter's
// gradient at the parameter's own offset: the two arenas must be laid out alike.
TEST_CASE("every gradient sits at its parameter's offset", "[model]") {
  for (int depth : {18, 50}) {
    ModelConfig cfg;
    cfg.depth = depth;
    cfg.classes = 10;
    cfg.width = 0.25;
    cfg.max_batch = 1;
    cfg.image_size = 32;
    Model m;
    buildModel(m, cfg);
    REQUIRE(m.grads.capacity == m.params.capacity);
    for (const ParamRef& p : parameterList(m)) {
      INFO("resnet" << depth << " " << p.name);
      CHECK(p.g - m.grads.base == p.w - m.params.base);
    }
  }
}

TEST_CASE("an image too small for the stem is refused with the smallest size", "[model]") {
  for (const bool cifar : {true, false}) {
    ModelConfig cfg;
    cfg.depth = 18;
    cfg.cifar_stem = cifar;
    cfg.max_batch = 1;
    cfg.image_size = 5;
    Model m;
    CHECK_THROWS_WITH(buildModel(m, cfg),
                      std::string("model: image size 5 is too small for the ") +
                          (cifar ? "cifar" : "imagenet") +
                          " stem (each stage halves it): at least " + (cifar ? "8" : "32"));
  }
}
