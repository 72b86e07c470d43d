// See unlink_on_signal.h.
#include "unlink_on_signal.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <iterator>

namespace accord::resnet {
namespace {

// What the handler reads: only lock-free atomics and a sig_atomic_t.
std::atomic<const char*> g_paths{nullptr};  // NUL-separated
volatile std::sig_atomic_t g_existing = 0;
std::atomic<bool> g_claimed{false};

extern "C" void unlinkThenDie(int sig) {
  const char* path = g_paths.load();
  for (int i = 0; path != nullptr && i < g_existing; ++i, path += std::strlen(path) + 1)
    ::unlink(path);
  // SA_RESETHAND made the action the default again; SA_NODEFER lets it through now.
  ::raise(sig);
}

}  // namespace

UnlinkOnSignal::UnlinkOnSignal(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) paths_ += path + '\0';
  bool unclaimed = false;
  if (!g_claimed.compare_exchange_strong(unclaimed, true)) return;
  covering_ = true;
  g_existing = 0;
  g_paths.store(paths_.data());
  struct sigaction action {};
  action.sa_handler = unlinkThenDie;
  action.sa_flags = SA_RESETHAND | SA_NODEFER;
  sigemptyset(&action.sa_mask);
  for (std::size_t i = 0; i < std::size(kSignals); ++i) {
    struct sigaction old {};
    if (::sigaction(kSignals[i], nullptr, &old) != 0 || old.sa_handler != SIG_DFL) continue;
    installed_[i] = ::sigaction(kSignals[i], &action, nullptr) == 0;
  }
}

UnlinkOnSignal::~UnlinkOnSignal() {
  if (!covering_) return;
  for (std::size_t i = 0; i < std::size(kSignals); ++i)
    if (installed_[i]) ::signal(kSignals[i], SIG_DFL);
  g_existing = 0;
  g_paths.store(nullptr);
  g_claimed.store(false);
}

void UnlinkOnSignal::exist(std::size_t count) {
  if (covering_) g_existing = static_cast<std::sig_atomic_t>(count);
}

}  // namespace accord::resnet
