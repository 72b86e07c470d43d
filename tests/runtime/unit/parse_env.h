// Config::parse over a made-up environment, for the unit tests of settings.
#pragma once

#include "runtime/config.h"

#include <accord/error.h>

#include <map>
#include <string>

namespace accord_test {

inline accord::Config parseEnv(const std::map<std::string, std::string>& env) {
  return accord::Config::parse([&](const char* var) -> const char* {
    auto it = env.find(var);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

// The error init() gives for `var`=`value`; "" when the value is accepted.
inline std::string parseError(const char* var, const std::string& value) {
  try {
    parseEnv({{var, value}});
  } catch (const accord::InvalidArgument& e) {
    return e.what();
  }
  return "";
}

}  // namespace accord_test
