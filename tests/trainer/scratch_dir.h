// Scratch folders of the trainer's unit tests: under the system's temporary folder, in
// a folder of this process's own, so that test processes running at once (CTest's
// parallel jobs, or the suites of two build trees) never share one; that folder goes
// when the process exits.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace accord_test {

// A fresh, empty folder `name` of this process's own.
inline std::filesystem::path scratchDir(const std::string& name) {
  namespace fs = std::filesystem;
  struct Root {
    fs::path path = fs::temp_directory_path() / ("accord_test." + std::to_string(::getpid()));
    ~Root() {
      std::error_code ignored;  // at exit, nothing to report it to
      fs::remove_all(path, ignored);
    }
  };
  static const Root root;
  const fs::path dir = root.path / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

}  // namespace accord_test
