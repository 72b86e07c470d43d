// How a handle ended, for the fault tests that run without the MPI test harness
// (test_fault.cc, tests/gpu/test_device_fault.cc): after a peer's failure MPI cannot be
// finalized, so they report with marker lines rather than Catch.
#pragma once

#include <accord/accord.h>

#include <chrono>
#include <exception>
#include <string>
#include <thread>

namespace accord_test {

// "ok", "CommError", "other" or "hang" (not done within 60 s), with the message.
inline std::string outcome(const accord::Handle& h, std::string& message) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!h.poll()) {
    if (std::chrono::steady_clock::now() > deadline) return "hang";
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  try {
    h.wait();
    return "ok";
  } catch (const accord::CommError& e) {
    message = e.what();
    return "CommError";
  } catch (const std::exception& e) {
    message = e.what();
    return "other";
  }
}

}  // namespace accord_test
