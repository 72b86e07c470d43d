// A build without the CUDA toolkit has no GPU support: the dispatcher runs host tensors
// only and refuses device tensors at submission (see DeviceSupport in op.h).
#include "ops/common/op.h"

#include <accord/accord.h>

namespace accord {

std::unique_ptr<DeviceSupport> makeDeviceSupport(const Config&) { return nullptr; }
bool deviceSupportBuilt() { return false; }
bool ncclBuilt() { return false; }
int cudaDevices(std::string* why) {
  if (why) *why = "this build of Accord has no GPU support";
  return 0;
}

// No device collectives here: every handle's cuda_event() is null (after completion).
bool Handle::wait_on_stream(void*) const { return cuda_event() != nullptr; }

}  // namespace accord
