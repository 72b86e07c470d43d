// resnet50Params() (see resnet50_params.h).
#include "resnet50_params.h"

namespace accord_bench {

// torchvision's resnet50().named_parameters(), in order: Bottleneck blocks [3, 4, 6, 3]
// (v1.5: the stride sits on conv2), each conv1/bn1/conv2/bn2/conv3/bn3 and, in the first
// block of every layer, downsample.0 (1x1 conv) / downsample.1 (batch norm).
std::vector<Param> resnet50Params() {
  std::vector<Param> params;
  auto conv = [&](const std::string& name, std::int64_t out, std::int64_t in, std::int64_t k) {
    params.push_back({name + ".weight", {out, in, k, k}});
  };
  auto bn = [&](const std::string& name, std::int64_t c) {
    params.push_back({name + ".weight", {c}});
    params.push_back({name + ".bias", {c}});
  };
  conv("conv1", 64, 3, 7);
  bn("bn1", 64);
  const int blocks[] = {3, 4, 6, 3};
  std::int64_t in = 64;
  for (int layer = 0; layer < 4; ++layer) {
    const std::int64_t planes = 64 << layer;
    for (int b = 0; b < blocks[layer]; ++b) {
      const std::string p = "layer" + std::to_string(layer + 1) + "." + std::to_string(b);
      conv(p + ".conv1", planes, in, 1);
      bn(p + ".bn1", planes);
      conv(p + ".conv2", planes, planes, 3);
      bn(p + ".bn2", planes);
      conv(p + ".conv3", planes * 4, planes, 1);
      bn(p + ".bn3", planes * 4);
      if (b == 0) {
        conv(p + ".downsample.0", planes * 4, in, 1);
        bn(p + ".downsample.1", planes * 4);
      }
      in = planes * 4;
    }
  }
  params.push_back({"fc.weight", {1000, 2048}});
  params.push_back({"fc.bias", {1000}});
  return params;
}

}  // namespace accord_bench
