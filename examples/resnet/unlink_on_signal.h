// Files removed when a signal ends the process while they are written.
//
// A signal that ends the process while a temporary file is written (Ctrl-C, the SIGTERM
// mpirun sends its ranks, a closed terminal's SIGHUP) would leave the file behind, one
// more per interrupted run. While an UnlinkOnSignal lives, those signals first remove
// the files it was told exist, then end the process as they would have. Only where a
// signal's action is the default one: a signal the process ignores or handles itself
// is left to it. One UnlinkOnSignal covers the process at a time; a second made while
// the first lives covers nothing (the writers that use it write one at a time).
#pragma once

#include <csignal>
#include <cstddef>
#include <string>
#include <vector>

namespace accord::resnet {

class UnlinkOnSignal {
 public:
  // `paths`: the files, in the order they will come to exist; none exists yet.
  explicit UnlinkOnSignal(const std::vector<std::string>& paths);
  ~UnlinkOnSignal();
  UnlinkOnSignal(const UnlinkOnSignal&) = delete;
  UnlinkOnSignal& operator=(const UnlinkOnSignal&) = delete;

  // The first `count` paths may exist now (0: none, after they were renamed away).
  // Say so before creating a file: a signal while it is opened then removes it too.
  void exist(std::size_t count);

 private:
  static constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
  std::string paths_;  // NUL-separated, for the handler
  bool covering_ = false;
  bool installed_[std::size(kSignals)] = {};
};

}  // namespace accord::resnet
