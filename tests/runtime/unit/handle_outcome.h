// How a handle ended, for the unit tests: "(completed)" or the failure's message.
#pragma once

#include "runtime/handle_state.h"

#include <catch2/catch.hpp>

#include <exception>
#include <string>

namespace accord_test {

inline std::string outcomeOf(const accord::detail::HandleState& handle) {
  REQUIRE(handle.done());
  try {
    handle.wait();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(completed)";
}

}  // namespace accord_test
