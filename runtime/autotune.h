// Online tuning of the settings that trade latency for bandwidth (ACCORD_AUTOTUNE=1):
// the fusion threshold, the piece size of large reductions and the cycle time.
//
// What is measured is what the user cares about: the time of a training step of the
// real workload. Steps are recognized without help from the application: data-parallel
// training submits the same named gradients every step, so a step boundary is each
// negotiation of the first allreduce name that was negotiated twice (the anchor). An
// anchor that stops coming back is dropped for another. Every rank sees the same responses in the
// same cycles, so every rank counts the same steps and reaches each trial's end in the
// same cycle. There rank 0, the only rank that times steps, decides the next settings
// and broadcasts them over the global set's negotiation channel, and every rank applies
// them before its next cycle: the fusion threshold and the piece size shape fusion plans
// and pieces, which must agree on every rank.
//
// The search is coordinate descent, one setting at a time (cycle time, fusion threshold,
// piece size), each over a fixed ladder of candidates plus its starting value, in two
// passes: the settings interact, and the first pass tries the first setting with the
// others still at their starting values. A trial runs one warm-up step, discarded (the
// fusion buffer grows, caches refill), then ACCORD_AUTOTUNE_STEPS measured steps, scored
// by their median. The best candidate of one setting is kept while the next one is
// tried; after the second pass the tuner settles on the best settings measured and stops. A setting
// given explicitly (ACCORD_ or HOROVOD_ variable) is kept as given and never tried.
// ACCORD_AUTOTUNE_START sets where the others start (by default, their defaults).
#pragma once

#include "runtime/config.h"
#include "runtime/message.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>
#include <unordered_set>
#include <vector>

namespace accord {

struct TunedSettings {
  std::size_t fusion_threshold = 0;
  std::size_t chunk_bytes = 0;
  std::chrono::microseconds cycle_time{0};

  bool operator==(const TunedSettings&) const = default;
  // "fusion threshold 64 KiB, pieces 1 MiB, cycle time 0 ms"
  std::string describe() const;
};

class Autotuner {
 public:
  using Clock = std::chrono::steady_clock;

  // The largest piece the tuner may choose: transports that size a window for pieces
  // up front make room for it.
  static std::size_t maxChunkBytes(const Config& config);

  // `decides`: this rank times the steps and chooses (the global set's rank 0).
  Autotuner(const Config& config, bool decides);
  // The loop ends (shutdown). A job that ended before the tuner settled ran on the
  // trial's settings: says which, in the log and as an "unsettled" line of the CSV.
  void finish();

  bool settled() const { return settled_; }
  const TunedSettings& current() const { return current_; }

  // One cycle of the global set, with its responses (before they run) and the cycle's
  // start. True when a trial ended in this cycle: the caller then passes decide()'s
  // bytes from rank 0 to every rank and hands them to accept().
  bool observe(const std::vector<Response>& responses, Clock::time_point now);
  // Rank 0: scores the trial that just ended and encodes the settings to run next (the
  // final ones once the search is over).
  std::vector<std::uint8_t> decide();
  // Every rank: the settings decide() encoded; they apply from the next cycle on.
  // Throws CommError on bytes that are not decide()'s.
  const TunedSettings& accept(const std::vector<std::uint8_t>& bytes);

  struct Trial {
    TunedSettings settings;
    double median_ms = 0;
    std::vector<double> steps_ms;
  };
  const std::vector<Trial>& trials() const { return trials_; }  // rank 0's record

 private:
  // One setting the search varies.
  struct Dimension {
    const char* name;
    std::size_t index;                      // into get()/set()
    std::vector<std::uint64_t> candidates;  // bytes, or microseconds for the cycle time
  };
  std::uint64_t get(const TunedSettings& s, std::size_t dim) const;
  void set(TunedSettings& s, std::size_t dim, std::uint64_t value) const;
  bool nextCandidate();  // moves to the next untried (dimension, candidate); false at the end
  void logTrial(const Trial& trial);

  bool decides_;
  std::size_t steps_;  // measured steps per trial
  std::vector<Dimension> dims_;
  TunedSettings start_, current_, best_;
  double best_ms_ = 0;
  std::size_t dim_ = 0, candidate_ = 0;
  std::vector<std::uint64_t> tried_;  // values of dims_[dim_] measured already
  bool baseline_done_ = false;
  static constexpr int kPasses = 2;
  int pass_ = 0;
  bool remeasure_ = false;  // the trial under way measures best_ afresh
  bool settled_ = false;

  // Step recognition, identical on every rank.
  std::string anchor_;
  std::unordered_set<std::string> seen_;  // allreduce names so far, while there is no anchor
  std::size_t since_anchor_ = 0;  // allreduce names negotiated since the anchor's last
  std::size_t boundaries_ = 0;    // step boundaries seen in this trial
  Clock::time_point last_boundary_{};
  std::vector<double> steps_ms_;  // this trial's measured steps (rank 0)

  std::vector<Trial> trials_;
  std::ofstream log_file_;  // ACCORD_AUTOTUNE_LOG, rank 0
};

}  // namespace accord
