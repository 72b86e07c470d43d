// Objects that must outlive every use MPI may still make of them.
//
// After a communication failure MPI may still complete transfers that could not be
// cancelled, writing into a transport's buffers, and freeing a communicator or a shared
// window would wait for peers that will never come. So the runtime, the backend and the
// transports are then never destroyed. keepAlive() says so where it happens: it moves the
// object into a list that lives as long as the process and is deliberately never
// destroyed. Unlike unique_ptr::release(), the object stays reachable, so a leak checker
// (LeakSanitizer in ci/sanitize.sh) does not report it while it still reports real leaks.
#pragma once

#include <memory>

namespace accord {

// Takes `object` and keeps it, undestroyed, until the process ends. Thread-safe.
void keepAlive(std::shared_ptr<void> object);

}  // namespace accord
