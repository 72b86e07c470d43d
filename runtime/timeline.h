// The timeline: a Chrome trace (chrome://tracing, Perfetto) of what rank 0's runtime
// does with each tensor, and of the application's own activities.
//
// One track per tensor name ("name [set 2]" in a process set other than the global
// one): QUEUE (submitted until the background thread took it), NEGOTIATE_ALLREDUCE, ...
// (until every rank agreed), then the collective (ALLREDUCE, ...; its arguments name the
// fused group and its bytes) with the backend's steps nested in it
// (MEMCPY_IN_FUSION_BUFFER, MPI_ALLREDUCE, MEMCPY_OUT_FUSION_BUFFER, ...). Cycles that
// ran collectives are instant events (CYCLE_START). The application adds tracks of its
// own (the trainer: compute, communication wait, data wait) through
// accord::timeline_begin / timeline_end.
//
// The file is valid JSON after every write: events are appended in front of the
// closing bracket, which is rewritten each time. What is recorded reaches the file
// within kWriteEvery (and at stop), so a process that is killed (SIGKILL, the OOM
// killer, a launcher tearing the job down) leaves a file that parses and holds the
// events that led to its end, missing at most the last kWriteEvery. The background
// thread writes at the end of a cycle when that much has passed; a writer thread of the
// timeline's own writes the rest, because the background thread can sit in one wait
// for seconds (a negotiation waiting for a frozen peer) just when the events before it
// matter most.
//
// Thread boundary: any thread may record (a mutex guards the buffer); recording is
// one relaxed atomic load when no timeline is being written. The writer thread runs
// from start() to stop() and takes the same mutex to write.
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace accord {

using Clock = std::chrono::steady_clock;

class Timeline {
 public:
  static Timeline& instance();

  // Starts writing to `path` (replacing it); InvalidArgument naming the path if it
  // cannot be created. Stops a timeline already being written first.
  void start(const std::string& path);
  // Ends every open activity, writes what is buffered and closes the file.
  void stop();
  // In a process forked after start(): records nothing more and never writes the
  // parent's file. Takes no lock (the fork may have copied it locked).
  void abandon();
  bool active() const { return active_.load(std::memory_order_relaxed); }

  // Every tensor of `tensors` enters `phase` at `at`, ending the phase it was in (if
  // any). `args`, when given, is attached to each (the fused group, its bytes).
  void tensorsPhase(const std::vector<std::string>& tensors, const char* phase,
                    Clock::time_point at, const std::string& args = {});
  // A complete activity with known start and end (queue).
  void tensorSpan(const std::string& tensor, const char* phase, Clock::time_point begin,
                  Clock::time_point end);
  // A step nested in each tensor's current phase, ending the previous step.
  void tensorsStep(const std::vector<std::string>& tensors, const char* step, Clock::time_point at);
  // Ends each tensor's step and phase.
  void tensorsDone(const std::vector<std::string>& tensors, Clock::time_point at);

  // Application tracks: `activity` begins on `track`, ending the one before.
  void begin(const std::string& track, const std::string& activity);
  void end(const std::string& track);

  // `args`: a JSON object's text (see quote()), or empty.
  void instant(const char* name, const std::string& args);

  // `text` as a JSON string literal, escaped by the JSON library.
  static std::string quote(const std::string& text);

  // The tracks of `names` submitted in process set `set`: the names themselves in the
  // global set, "name [set 2]" in another, so that one name in two sets (negotiated
  // apart, at other times) gets two tracks rather than interleaved phases on one.
  // In the global set, `names` itself (no copy per traced response); else `renamed`, filled.
  static const std::vector<std::string>& tracksOf(int set, const std::vector<std::string>& names,
                                                  std::vector<std::string>& renamed);

  // Appends the buffered events to the file when kWriteEvery has passed since the last
  // write, or `now`. Background thread, once per cycle.
  void flush(bool now = false);
  // 20 ms: a crash loses at most the events of that long, and the writer thread's 50
  // wake-ups a second (only while a timeline is written) cost no measurable time.
  static constexpr std::chrono::milliseconds kWriteEvery{20};

 private:
  struct Track {
    int tid = 0;
    bool phase_open = false;
    bool step_open = false;
  };

  Track& track(const std::string& name, bool tensor);  // mu_ held
  // Appends one event. `name` and `args` must already be JSON (a quoted string, an
  // object) or empty; only phase names that are literals (the k*Phase and k*Step
  // constants, message.cc's phase names) are passed unescaped, everything from outside
  // goes through nlohmann::json.
  void event(char ph, int tid, double ts, const char* name = nullptr,
             const std::string& args = {});  // mu_ held
  void closeTrack(Track& t, double ts);      // mu_ held
  double micros(Clock::time_point t) const;
  void writeLocked();
  void writeEvery(int generation);  // the writer thread's body

  std::atomic<bool> active_{false};
  std::mutex mu_;
  int fd_ = -1;
  std::string path_;
  std::string buffer_;
  std::int64_t closing_at_ = 0;  // file offset of the closing bracket
  Clock::time_point origin_{};
  std::unordered_map<std::string, Track> tensors_, app_tracks_;
  int next_tid_ = 1;
  Clock::time_point last_write_{};
  std::thread writer_;
  std::condition_variable writer_cv_;  // wakes the writer thread at stop()
  int generation_ = 0;                 // one per start(): the writer of an older one ends
};

// The phases' and steps' names, Horovod's where Horovod has the same thing, so that a
// trace reads as Horovod's does; the negotiation and collective phases are named by
// negotiatePhaseName() and collectivePhaseName() (message.h).
inline constexpr const char* kQueuePhase = "QUEUE";
inline constexpr const char* kCyclePhase = "CYCLE_START";
inline constexpr const char* kCopyInStep = "MEMCPY_IN_FUSION_BUFFER";
inline constexpr const char* kCopyOutStep = "MEMCPY_OUT_FUSION_BUFFER";
inline constexpr const char* kMpiAllreduceStep = "MPI_ALLREDUCE";
inline constexpr const char* kAdasumStep = "MPI_ADASUM_ALLREDUCE";
// Accord's own: the shared-memory window, and the reduction across hosts in stages.
inline constexpr const char* kShmAllreduceStep = "SHM_ALLREDUCE";
inline constexpr const char* kHierarchicalAllreduceStep = "HIERARCHICAL_ALLREDUCE";

// The backend's steps of the response this thread is executing: every tensor of it
// enters `step` (no-op unless the executor set a current response; see executor.cc).
void timelineStep(const char* step);

// Set by the executor around one response's execution (background thread).
class TimelineScope {
 public:
  explicit TimelineScope(const std::vector<std::string>* names);
  ~TimelineScope();
  TimelineScope(const TimelineScope&) = delete;
  TimelineScope& operator=(const TimelineScope&) = delete;
};

}  // namespace accord
