// A build without the CUDA toolkit has no GPU support: the OpManager runs host tensors
// only and refuses device tensors at submission (see DeviceSupport in op.h).
#include "ops/op.h"

namespace accord {

std::unique_ptr<DeviceSupport> makeDeviceSupport(const Config&) { return nullptr; }
bool deviceSupportBuilt() { return false; }
bool ncclBuilt() { return false; }

}  // namespace accord
