#pragma once

#include "buffer.h"

#include <pybind11/pybind11.h>

#include <memory>

namespace accord::python {

// A "dltensor" capsule over `buffer` (compact, row-major, CPU) that keeps it alive
// until the consumer (torch.utils.dlpack.from_dlpack) calls the deleter, or until the
// capsule is dropped unconsumed. The deleter needs no GIL: it may run on any thread.
pybind11::capsule toDLPack(std::shared_ptr<Buffer> buffer);

}  // namespace accord::python
