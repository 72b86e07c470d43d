// Progress of the data tools (accord-make-jpegs, accord-pack) on stderr: on a terminal
// one line rewritten in place; into a log (a pipe, a file) a whole line now and then,
// so that no carriage returns pile up there.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

namespace accord_tools {

class Progress {
 public:
  // "accord-pack: 120 / 500 images (24%)"; quiet: nothing at all.
  Progress(std::string tool, std::int64_t total, bool quiet = false)
      : tool_(std::move(tool)),
        total_(total),
        quiet_(quiet),
        terminal_(isatty(STDERR_FILENO) != 0),
        every_(terminal_ ? 500 : 5000) {}

  // One more image done. Thread-safe.
  void advance() {
    if (quiet_) return;
    std::lock_guard<std::mutex> lock(mutex_);
    const std::int64_t done = ++done_;
    const auto now = Clock::now();
    if (done < total_ && now - last_ < every_) return;
    last_ = now;
    open_line_ = terminal_ && done < total_;
    std::fprintf(
        stderr, "%s%s: %lld / %lld images (%.0f%%)%s", terminal_ ? "\r" : "", tool_.c_str(),
        static_cast<long long>(done), static_cast<long long>(total_),
        total_ > 0 ? 100.0 * static_cast<double>(done) / static_cast<double>(total_) : 100.0,
        open_line_ ? "" : "\n");
  }

  // Ends a line left open on the terminal, before an error message.
  void interrupt() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (open_line_) std::fprintf(stderr, "\n");
    open_line_ = false;
  }

 private:
  using Clock = std::chrono::steady_clock;
  std::mutex mutex_;
  const std::string tool_;
  const std::int64_t total_;
  const bool quiet_;
  const bool terminal_;
  const std::chrono::milliseconds every_;
  std::int64_t done_ = 0;
  Clock::time_point last_ = Clock::now();
  bool open_line_ = false;
};

}  // namespace accord_tools
