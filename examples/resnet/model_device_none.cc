// --device in a build without the GPU layers (no CUDA toolkit or no cuDNN): only the
// CPU is there. See model_device.h.
#include "model_device.h"

#include <accord/error.h>

namespace accord::resnet {

void pinHostMemory(Model&, float*, std::size_t) {}

std::string useDevice(Model&, const std::string& device, int, const std::string& precision) {
  if (device == "cpu") {
    if (precision != "fp32" && precision != "auto")
      throw InvalidArgument("--precision " + precision +
                            " needs --device cuda (the CPU layers are fp32)");
    return "fp32";
  }
  if (device == "cuda")
    throw InvalidArgument(
        "--device cuda: this build has no GPU layers (it found no CUDA toolkit or no cuDNN; "
        "set CUDNN_ROOT and rebuild)");
  throw InvalidArgument("unknown --device '" + device + "' (expected cpu or cuda)");
}

// Never reached: useDevice never sets Model::device in this build.
void deviceForward(Model&, int) { throw Error("deviceForward: no GPU layers in this build"); }
float deviceLoss(Model&, const int32_t*, int, float, bool) {
  throw Error("deviceLoss: no GPU layers in this build");
}
nn::TopK deviceAccuracy(Model&, const int32_t*, int) {
  throw Error("deviceAccuracy: no GPU layers in this build");
}
void deviceBackward(Model&, int) { throw Error("deviceBackward: no GPU layers in this build"); }
void trainOnDevice(Model&, const Sgd&) {
  throw Error("trainOnDevice: no GPU layers in this build");
}
void pushToDevice(Model&, const Sgd&) { throw Error("pushToDevice: no GPU layers in this build"); }
void pullToHost(Model&, Sgd&) { throw Error("pullToHost: no GPU layers in this build"); }
void deviceSgdStep(Model&, double) { throw Error("deviceSgdStep: no GPU layers in this build"); }
bool deviceGradientsFinite(Model&, const Sgd&) {
  throw Error("deviceGradientsFinite: no GPU layers in this build");
}
LoaderHooks uploadAhead(Model&, const std::vector<std::pair<float*, std::size_t>>&) {
  throw Error("uploadAhead: no GPU layers in this build");
}
void searchConvolutionAlgorithms(Model&, bool) {
  throw Error("searchConvolutionAlgorithms: no GPU layers in this build");
}
void deterministicLayers(Model&, bool) {
  throw Error("deterministicLayers: no GPU layers in this build");
}
void fuseConvBatchNorm(Model&, bool) {
  throw Error("fuseConvBatchNorm: no GPU layers in this build");
}
void fuseResidual(Model&, bool) { throw Error("fuseResidual: no GPU layers in this build"); }
void padInput(Model&, int) { throw Error("padInput: no GPU layers in this build"); }
void graphSegments(Model&, std::size_t) {
  throw Error("graphSegments: no GPU layers in this build");
}
std::string convBatchNormFusionReport(const Model&) {
  throw Error("convBatchNormFusionReport: no GPU layers in this build");
}
void useDevicePool(Model&, const float*, int) {
  throw Error("useDevicePool: no GPU layers in this build");
}
void deviceInputFromPool(Model&, const std::int64_t*, int) {
  throw Error("deviceInputFromPool: no GPU layers in this build");
}
void profileDevice(Model&) { throw Error("profileDevice: no GPU layers in this build"); }
void resetDeviceProfile(Model&) { throw Error("resetDeviceProfile: no GPU layers in this build"); }
std::string deviceProfileReport(Model&, int) {
  throw Error("deviceProfileReport: no GPU layers in this build");
}
void deviceTrainStep(Model&, const int32_t*, int, float, StepLaunch) {
  throw Error("deviceTrainStep: no GPU layers in this build");
}
float* deviceStepLoss(Model&) { throw Error("deviceStepLoss: no GPU layers in this build"); }
DeviceStepResult deviceStepResult(Model&) {
  throw Error("deviceStepResult: no GPU layers in this build");
}
GraphStats deviceGraphStats(const Model&) { return {}; }
int deviceIndex(const Model&) { throw Error("deviceIndex: no GPU layers in this build"); }
void* deviceStream(const Model&) { throw Error("deviceStream: no GPU layers in this build"); }

}  // namespace accord::resnet
