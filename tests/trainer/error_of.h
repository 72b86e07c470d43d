// The trainer's data tests: what a call that should fail says.
#pragma once

#include "idx.h"

#include <string>

namespace accord_test {

// The message of the DataError that f() throws; "" when it throws none.
template <class F>
std::string errorOf(F&& f) {
  try {
    f();
  } catch (const accord::resnet::DataError& e) {
    return e.what();
  }
  return "";
}

}  // namespace accord_test
