// The Chrome-trace timeline (see timeline.h).
#include "runtime/timeline.h"

#include <accord/error.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <new>

#include <fcntl.h>
#include <unistd.h>

namespace accord {

namespace {

constexpr const char* kClosing = "\n]\n";

// The response the background thread is executing, for timelineStep().
thread_local const std::vector<std::string>* t_current = nullptr;

}  // namespace

Timeline& Timeline::instance() {
  static Timeline* timeline = new Timeline();  // used until the process exits
  return *timeline;
}

void Timeline::start(const std::string& path) {
  stop();
  std::lock_guard<std::mutex> lock(mu_);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw InvalidArgument("timeline: cannot create '" + path + "': " + std::strerror(errno));
  fd_ = fd;
  path_ = path;
  origin_ = Clock::now();
  closing_at_ = 0;
  tensors_.clear();
  app_tracks_.clear();
  next_tid_ = 1;
  buffer_ = "[\n";
  buffer_ += nlohmann::json({{"name", "process_name"},
                             {"ph", "M"},
                             {"pid", 0},
                             {"tid", 0},
                             {"args", {{"name", "Accord (rank 0)"}}}})
                 .dump();
  writeLocked();
  active_.store(true, std::memory_order_relaxed);
  writer_ = std::thread([this, generation = ++generation_] { writeEvery(generation); });
}

void Timeline::stop() {
  std::thread writer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Also after a failed write closed the file: its writer thread has ended, unjoined.
    writer = std::move(writer_);  // joined by this caller only, outside the lock
    ++generation_;
    if (fd_ >= 0) {
      active_.store(false, std::memory_order_relaxed);
      const double ts = micros(Clock::now());
      for (auto* tracks : {&tensors_, &app_tracks_})
        for (auto& [name, t] : *tracks) closeTrack(t, ts);
      writeLocked();
      ::close(fd_);
      fd_ = -1;
    }
  }
  writer_cv_.notify_all();
  if (writer.joinable()) writer.join();
}

void Timeline::abandon() {
  active_.store(false, std::memory_order_relaxed);
  if (fd_ >= 0) ::close(fd_);  // this process's copy of the descriptor only
  fd_ = -1;
  // The writer thread was not copied into this process: forget it without a join.
  new (&writer_) std::thread();
}

// Writes what is buffered every kWriteEvery, whether or not the background thread is
// cycling, until stop() (or a failed write) ends this timeline.
void Timeline::writeEvery(int generation) {
  std::unique_lock<std::mutex> lock(mu_);
  while (generation_ == generation && fd_ >= 0) {
    writer_cv_.wait_for(lock, kWriteEvery);
    if (generation_ != generation || fd_ < 0) break;
    if (!buffer_.empty()) writeLocked();
  }
}

const std::vector<std::string>& Timeline::tracksOf(int set, const std::vector<std::string>& names,
                                                   std::vector<std::string>& renamed) {
  if (set == 0) return names;  // the global process set
  renamed.clear();
  renamed.reserve(names.size());
  for (const std::string& name : names)
    renamed.push_back(name + " [set " + std::to_string(set) + "]");
  return renamed;
}

double Timeline::micros(Clock::time_point t) const {
  return std::chrono::duration<double, std::micro>(t - origin_).count();
}

Timeline::Track& Timeline::track(const std::string& name, bool tensor) {
  auto& tracks = tensor ? tensors_ : app_tracks_;
  auto [it, added] = tracks.try_emplace(name);
  if (added) {
    const int tid = it->second.tid = next_tid_++;
    // The track's name, from the application, goes through the JSON library once here;
    // its events refer to it by number. Application tracks sort above the tensors.
    buffer_ += ",\n";
    buffer_ += nlohmann::json({{"name", "thread_name"},
                               {"ph", "M"},
                               {"pid", 0},
                               {"tid", tid},
                               {"args", {{"name", name}}}})
                   .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    buffer_ += ",\n";
    buffer_ += nlohmann::json({{"name", "thread_sort_index"},
                               {"ph", "M"},
                               {"pid", 0},
                               {"tid", tid},
                               {"args", {{"sort_index", tensor ? tid + 100000 : tid}}}})
                   .dump();
  }
  return it->second;
}

void Timeline::event(char ph, int tid, double ts, const char* name, const std::string& args) {
  fmt::format_to(std::back_inserter(buffer_),
                 ",\n{{\"ph\":\"{}\",\"pid\":0,\"tid\":{},\"ts\":{:.3f}", ph, tid, ts);
  if (name) fmt::format_to(std::back_inserter(buffer_), ",\"name\":\"{}\"", name);
  if (!args.empty()) {
    buffer_ += ",\"args\":";
    buffer_ += args;
  }
  buffer_ += '}';
}

void Timeline::closeTrack(Track& t, double ts) {
  if (t.step_open) event('E', t.tid, ts);
  if (t.phase_open) event('E', t.tid, ts);
  t.step_open = t.phase_open = false;
}

std::string Timeline::quote(const std::string& text) {
  return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void Timeline::tensorsPhase(const std::vector<std::string>& tensors, const char* phase,
                            Clock::time_point at, const std::string& a) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0) return;
  const double ts = micros(at);
  for (const auto& tensor : tensors) {
    Track& t = track(tensor, true);
    closeTrack(t, ts);
    event('B', t.tid, ts, phase, a);
    t.phase_open = true;
  }
}

void Timeline::tensorSpan(const std::string& tensor, const char* phase, Clock::time_point begin,
                          Clock::time_point end) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0) return;
  Track& t = track(tensor, true);
  const double b = micros(begin);
  closeTrack(t, b);
  event('X', t.tid, b, phase);
  // "dur" goes inside the object the event opened: reopen it.
  buffer_.pop_back();
  fmt::format_to(std::back_inserter(buffer_), ",\"dur\":{:.3f}}}", std::max(0.0, micros(end) - b));
}

void Timeline::tensorsStep(const std::vector<std::string>& tensors, const char* step,
                           Clock::time_point at) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0) return;
  const double ts = micros(at);
  for (const auto& tensor : tensors) {
    Track& t = track(tensor, true);
    if (t.step_open) event('E', t.tid, ts);
    event('B', t.tid, ts, step);
    t.step_open = true;
  }
}

void Timeline::tensorsDone(const std::vector<std::string>& tensors, Clock::time_point at) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0) return;
  const double ts = micros(at);
  for (const auto& tensor : tensors) closeTrack(track(tensor, true), ts);
}

void Timeline::begin(const std::string& name, const std::string& activity) {
  if (!active()) return;
  const std::string quoted = quote(activity);
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0) return;
  Track& t = track(name, false);
  const double ts = micros(Clock::now());
  closeTrack(t, ts);
  // The activity's name is already a JSON string: append the event around it.
  event('B', t.tid, ts);
  buffer_.pop_back();
  buffer_ += ",\"name\":";
  buffer_ += quoted;
  buffer_ += '}';
  t.phase_open = true;
}

void Timeline::end(const std::string& name) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0) return;
  closeTrack(track(name, false), micros(Clock::now()));
}

void Timeline::instant(const char* name, const std::string& a) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0) return;
  event('i', 0, micros(Clock::now()), name, a);
  buffer_.pop_back();
  buffer_ += ",\"s\":\"p\"}";
}

void Timeline::flush(bool now) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0 || buffer_.empty()) return;
  const auto t = Clock::now();
  if (!now && t - last_write_ < kWriteEvery) return;
  writeLocked();
}

// Writes the buffer over the old closing bracket and a new bracket after it, in one
// call, so that the file is complete JSON before and after.
void Timeline::writeLocked() {
  if (fd_ < 0) return;
  buffer_ += kClosing;
  const char* p = buffer_.data();
  std::size_t left = buffer_.size();
  std::int64_t at = closing_at_;
  while (left > 0) {
    const ssize_t n = ::pwrite(fd_, p, left, at);
    if (n < 0) {
      if (errno == EINTR) continue;
      // A full disk must not stop training: stop the timeline and say so once. What
      // this write got in goes; the closing bracket goes back where it was, in space
      // the file held before, so the file stays the complete JSON it was.
      const int error = errno;
      if (::ftruncate(fd_, closing_at_) == 0)
        (void)!::pwrite(fd_, kClosing, std::strlen(kClosing), closing_at_);
      std::fprintf(stderr, "[accord] timeline: writing '%s' failed (%s); timeline stopped\n",
                   path_.c_str(), std::strerror(error));
      active_.store(false, std::memory_order_relaxed);
      ::close(fd_);
      fd_ = -1;
      buffer_.clear();
      return;
    }
    p += n;
    left -= static_cast<std::size_t>(n);
    at += n;
  }
  closing_at_ = at - static_cast<std::int64_t>(std::strlen(kClosing));
  buffer_.clear();
  last_write_ = Clock::now();
}

void timelineStep(const char* step) {
  if (!t_current || !Timeline::instance().active()) return;
  Timeline::instance().tensorsStep(*t_current, step, Clock::now());
}

TimelineScope::TimelineScope(const std::vector<std::string>* names) { t_current = names; }
TimelineScope::~TimelineScope() { t_current = nullptr; }

}  // namespace accord
