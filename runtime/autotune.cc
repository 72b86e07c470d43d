// Autotuner (see autotune.h).
#include "runtime/autotune.h"

#include "runtime/logging.h"

#include <accord/error.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace accord {

namespace {

// The ladders span what each setting's trade-off can reach on hosts from laptops to
// multi-GPU nodes: fusion from "only the tiny tensors" to "a whole step's gradients",
// pieces around the cache sizes where the reduction's working set lives, cycle times
// from none to a few milliseconds of batching.
constexpr std::uint64_t kFusionLadder[] = {16u << 10, 64u << 10, 256u << 10, 1u << 20,
                                           4u << 20,  16u << 20, 64u << 20};
constexpr std::uint64_t kChunkLadder[] = {256u << 10, 512u << 10, 1u << 20, 2u << 20, 4u << 20};
constexpr std::uint64_t kCycleLadderUs[] = {0, 500, 2000, 5000};
// A name not negotiated again after this many others is no step boundary.
constexpr std::size_t kAnchorPatience = 100'000;
constexpr std::uint8_t kWireTag = 0xA7;

std::string bytesText(std::uint64_t b) {
  if (b >= (1u << 20) && b % (1u << 20) == 0) return fmt::format("{} MiB", b >> 20);
  if (b >= (1u << 10) && b % (1u << 10) == 0) return fmt::format("{} KiB", b >> 10);
  return fmt::format("{} B", b);
}

std::vector<std::uint64_t> withStart(const std::uint64_t* begin, const std::uint64_t* end,
                                     std::uint64_t start) {
  std::vector<std::uint64_t> v(begin, end);
  if (std::find(v.begin(), v.end(), start) == v.end()) v.push_back(start);
  std::sort(v.begin(), v.end());
  return v;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void put(std::vector<std::uint8_t>& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

std::uint64_t take(const std::vector<std::uint8_t>& in, std::size_t at) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= std::uint64_t{in[at + i]} << (8 * i);
  return v;
}

}  // namespace

std::string TunedSettings::describe() const {
  return fmt::format("fusion threshold {}, pieces {}, cycle time {:g} ms",
                     bytesText(fusion_threshold), bytesText(chunk_bytes),
                     static_cast<double>(cycle_time.count()) / 1000.0);
}

std::size_t Autotuner::maxChunkBytes(const Config& config) {
  if (!config.autotune || config.given.chunk_bytes) return config.chunk_bytes;
  return std::max<std::size_t>(config.chunk_bytes, std::end(kChunkLadder)[-1]);
}

Autotuner::Autotuner(const Config& config, bool decides)
    : decides_(decides), steps_(std::max<std::size_t>(config.autotune_steps, 1)) {
  start_.fusion_threshold = config.fusion_threshold;
  start_.chunk_bytes = config.chunk_bytes;
  start_.cycle_time = config.cycle_time;
  current_ = best_ = start_;
  // Cycle time first: a long one hides what the others change.
  if (!config.given.cycle_time)
    dims_.push_back({"cycle time", 2,
                     withStart(std::begin(kCycleLadderUs), std::end(kCycleLadderUs),
                               static_cast<std::uint64_t>(start_.cycle_time.count()))});
  if (!config.given.fusion_threshold)
    dims_.push_back(
        {"fusion threshold", 0,
         withStart(std::begin(kFusionLadder), std::end(kFusionLadder), start_.fusion_threshold)});
  if (!config.given.chunk_bytes)
    dims_.push_back(
        {"pieces", 1,
         withStart(std::begin(kChunkLadder), std::end(kChunkLadder), start_.chunk_bytes)});
  settled_ = dims_.empty();
  if (settled_) {
    if (decides_)
      log().info("autotune: every tunable setting was given explicitly; nothing to tune");
    return;
  }
  if (decides_ && !config.autotune_log.empty()) {
    // init() checked that it opens; a file that went away since is reported, not fatal
    // (this runs on the background thread, where a throw would end the process).
    log_file_.open(config.autotune_log, std::ios::out | std::ios::trunc);
    if (!log_file_)
      log().error("ACCORD_AUTOTUNE_LOG='{}': cannot open it for writing; no log is written",
                  config.autotune_log);
    log_file_ << "trial,fusion_threshold_bytes,chunk_bytes,cycle_time_ms,median_step_ms,steps_ms\n";
    log_file_.flush();
  }
  if (decides_) {
    log().info("autotune: starting from {}; {} measured steps per trial", start_.describe(),
               steps_);
  }
}

std::uint64_t Autotuner::get(const TunedSettings& s, std::size_t index) const {
  switch (index) {
    case 0:
      return s.fusion_threshold;
    case 1:
      return s.chunk_bytes;
    default:
      return static_cast<std::uint64_t>(s.cycle_time.count());
  }
}

void Autotuner::set(TunedSettings& s, std::size_t index, std::uint64_t value) const {
  switch (index) {
    case 0:
      s.fusion_threshold = value;
      break;
    case 1:
      s.chunk_bytes = value;
      break;
    default:
      s.cycle_time = std::chrono::microseconds(value);
  }
}

bool Autotuner::observe(const std::vector<Response>& responses, Clock::time_point now) {
  if (settled_) return false;
  bool boundary = false;
  for (const auto& response : responses) {
    if (response.type != ResponseType::Allreduce) continue;
    for (const auto& name : response.names) {
      if (anchor_.empty()) {
        // The first name negotiated a second time marks steps; names used once (set-up
        // collectives, unnamed ones) never do.
        if (seen_.insert(name).second) {
          if (seen_.size() > kAnchorPatience) seen_.clear();
          continue;
        }
        anchor_ = name;
        seen_.clear();
        since_anchor_ = 0;
        boundaries_ = 0;  // the trial's timing starts with the anchor
        steps_ms_.clear();
        boundary = true;
      } else if (name == anchor_) {
        since_anchor_ = 0;
        boundary = true;
      } else if (++since_anchor_ > kAnchorPatience) {
        anchor_.clear();  // the workload changed: find another
        since_anchor_ = 0;
      }
    }
  }
  if (!boundary) return false;
  ++boundaries_;
  if (decides_ && boundaries_ > 2) {  // the first step after the trial's start is warm-up
    steps_ms_.push_back(std::chrono::duration<double, std::milli>(now - last_boundary_).count());
  }
  last_boundary_ = now;
  return boundaries_ >= steps_ + 2;
}

void Autotuner::finish() {
  if (!decides_ || settled_ || dims_.empty()) return;
  const auto cycle_ms = static_cast<double>(current_.cycle_time.count()) / 1000.0;
  log().info("autotune: the job ended before it settled, after {} trials; {} were in force",
             trials_.size(), current_.describe());
  if (log_file_) {
    log_file_ << fmt::format("unsettled,{},{},{:g},,\n", current_.fusion_threshold,
                             current_.chunk_bytes, cycle_ms);
    log_file_.flush();
  }
}

bool Autotuner::nextCandidate() {
  while (dim_ < dims_.size()) {
    const auto& dim = dims_[dim_];
    // The best value so far was measured already, with every other setting as now.
    if (candidate_ == static_cast<std::size_t>(-1)) tried_ = {get(best_, dim.index)};
    while (++candidate_ < dim.candidates.size()) {
      const std::uint64_t value = dim.candidates[candidate_];
      if (std::find(tried_.begin(), tried_.end(), value) != tried_.end()) continue;
      tried_.push_back(value);
      return true;
    }
    ++dim_;
    candidate_ = static_cast<std::size_t>(-1);
  }
  return false;
}

void Autotuner::logTrial(const Trial& trial) {
  log().info("autotune: trial {}: {}: median step {:.3f} ms over {} steps", trials_.size(),
             trial.settings.describe(), trial.median_ms, trial.steps_ms.size());
  if (!log_file_) return;
  std::string steps;
  for (double ms : trial.steps_ms) steps += fmt::format("{}{:.3f}", steps.empty() ? "" : " ", ms);
  log_file_ << fmt::format("{},{},{},{:g},{:.3f},{}\n", trials_.size(),
                           trial.settings.fusion_threshold, trial.settings.chunk_bytes,
                           static_cast<double>(trial.settings.cycle_time.count()) / 1000.0,
                           trial.median_ms, steps);
  log_file_.flush();
}

std::vector<std::uint8_t> Autotuner::decide() {
  Trial trial{current_, median(steps_ms_), steps_ms_};
  trials_.push_back(trial);
  logTrial(trial);
  if (remeasure_ || !baseline_done_ || trial.median_ms < best_ms_) {
    best_ms_ = trial.median_ms;
    best_ = current_;
    remeasure_ = false;
  }
  if (!baseline_done_) {
    baseline_done_ = true;
    dim_ = 0;
    candidate_ = static_cast<std::size_t>(-1);
  }
  TunedSettings next = best_;
  bool done = !nextCandidate();
  if (done && pass_ + 1 < kPasses) {
    // Another pass: each setting again, now with the others at their best. It starts by
    // measuring the best settings afresh, so that a lucky figure from the first pass
    // does not decide the second.
    ++pass_;
    dim_ = 0;
    candidate_ = static_cast<std::size_t>(-1);
    remeasure_ = true;
    done = false;
  } else if (!done) {
    set(next, dims_[dim_].index, dims_[dim_].candidates[candidate_]);
  }
  if (done) {
    log().info(
        "autotune: settled on {}: median step {:.3f} ms, {:.3f} ms with the starting "
        "settings, after {} trials",
        best_.describe(), best_ms_, trials_.front().median_ms, trials_.size());
    if (log_file_) {
      log_file_ << fmt::format("settled,{},{},{:g},{:.3f},\n", best_.fusion_threshold,
                               best_.chunk_bytes,
                               static_cast<double>(best_.cycle_time.count()) / 1000.0, best_ms_);
      log_file_.flush();
    }
  }
  std::vector<std::uint8_t> out{kWireTag, static_cast<std::uint8_t>(done ? 1 : 0)};
  put(out, next.fusion_threshold);
  put(out, next.chunk_bytes);
  put(out, static_cast<std::uint64_t>(next.cycle_time.count()));
  return out;
}

const TunedSettings& Autotuner::accept(const std::vector<std::uint8_t>& bytes) {
  if (bytes.size() != 2 + 3 * 8 || bytes[0] != kWireTag || bytes[1] > 1) {
    throw CommError("autotune: rank 0 sent " + std::to_string(bytes.size()) +
                    " bytes that are not a choice of settings");
  }
  settled_ = bytes[1] == 1;
  current_.fusion_threshold = take(bytes, 2);
  current_.chunk_bytes = take(bytes, 10);
  current_.cycle_time = std::chrono::microseconds(take(bytes, 18));
  boundaries_ = 1;  // this cycle's boundary starts the next trial
  steps_ms_.clear();
  return current_;
}

}  // namespace accord
