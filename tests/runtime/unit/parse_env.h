// Config::parse over a made-up environment, for the unit tests of settings.
#pragma once

#include "runtime/config.h"

#include <map>
#include <string>

namespace accord_test {

inline accord::Config parseEnv(const std::map<std::string, std::string>& env) {
  return accord::Config::parse([&](const char* var) -> const char* {
    auto it = env.find(var);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

}  // namespace accord_test
