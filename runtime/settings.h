// The table of Accord's settings (runtime/settings.def) as constexpr data: what every
// consumer of a setting reads (Config::parse and describe, the agreement check at init,
// the accord-settings tool behind accordrun's flags and docs/configuration.md).
#pragma once

#include <cstddef>
#include <string_view>

namespace accord::settings {

// How a setting is written, and so how it is parsed and checked.
enum class Kind {
  Bytes,         // whole bytes, or a K/M/G suffix (KiB multiples), optionally "B" / "iB"
  Count,         // a whole number
  Milliseconds,  // fractional milliseconds, kept to the microsecond
  Seconds,       // fractional seconds, kept to the millisecond
  LogLevel,      // trace debug info warn error off (Horovod's warning and fatal too)
  Text,          // a name, as given
  Path,          // a file: as given, compared with its alias as the file it names
  List,          // ACCORD_AUTOTUNE_START's NAME=VALUE list
};

enum Scope : unsigned {
  kAgree = 1,          // must be the same on every rank
  kTuned = 2,          // ACCORD_AUTOTUNE may change it where it is not set
  kAutotuneOnly = 4,   // read only with ACCORD_AUTOTUNE=1
  kGivenAgrees = 8,    // whether it is set (not only its value) must agree across ranks
};

// Defaults; the accord-bench measurements behind them are in docs/performance.md ("Why
// the defaults").
// - Chunk: 1 MiB pieces keep a piece and what arrives for it in L2 between arriving and
//   being passed on; smaller pieces pay more waits per byte, larger ones leave the cache.
// - Fusion threshold: fusing saves calls but costs a copy in and out; past a few hundred
//   KiB the copies cost more than the calls they save. 64 KiB still merges the many
//   small batch-norm and bias tensors.
// - Cycle time: 0, negotiate as soon as work arrives. A training step's tensors arrive
//   in a stream and are fused anyway; waiting for more only adds latency.
// - Stall times follow Horovod: report after a minute, give up after five.
//
// Upper bounds: what can really be allocated and used, so that a typo ("16G" for "16M")
// fails at init, naming the variable, rather than deep inside MPI or as a wrapped size.
// - Chunk: the shared-memory window holds two pieces for every rank of the host, so
//   1 GiB pieces already take 2 GiB of /dev/shm per rank, 16 GiB for 8 ranks: about
//   what a large node offers (16G failed inside MPI_Win_allocate_shared, and 2^63
//   wrapped the window's size). Past 1 MiB, larger pieces were only slower.
// - Fusion threshold: the fusion buffer grows to the largest fused group, so this much
//   heap per rank must be there for the taking; 4 GiB is allocatable on any 64-bit
//   training node, and fusion stops paying off at a few hundred KiB.
// - Cache: every process set allocates all its slots at init, ~350 bytes each (a cached
//   response and request), and exchanges a bit per slot; 65536 slots are 22 MiB and an
//   8 KiB vector, for models that have at most a few thousand tensors.
// - Carry: every MPI negotiation channel holds two buffers of this size; past the
//   round trip it saves, carrying more only delays the negotiation behind the data.
inline constexpr double kMinChunkBytes = 4u << 10;  // below a page, chunking is all overhead
inline constexpr double kMaxChunkBytes = 1u << 30;
inline constexpr double kMaxFusionThreshold = 4.0 * (1u << 30);
inline constexpr double kMaxCacheCapacity = 1u << 16;
inline constexpr double kMaxCarryBytes = 1u << 20;
// Times: the cycle time is kept in microseconds and the stall times in milliseconds; a
// value below that resolution would round to 0, which means "no wait" or "never".
inline constexpr double kMaxCycleTimeMs = 10'000.0;
inline constexpr double kMaxSeconds = 1e9;  // keeps the milliseconds well inside int64
// Host name: every rank of a machine exchanges its name at each split by host; a name
// is a label, and 255 bytes is what hostnames are allowed anyway.
inline constexpr double kMaxHostNameBytes = 255;
// Paths: what the file system takes (PATH_MAX).
inline constexpr double kMaxPathBytes = 4096;
// Autotune: more steps per trial only lengthen the search; a thousand is already hours.
inline constexpr double kMaxAutotuneSteps = 1000;

struct Setting {
  const char* name;      // ACCORD_FUSION_THRESHOLD
  const char* horovod;   // HOROVOD_FUSION_THRESHOLD, or ""
  Kind kind;
  double min, max;       // whole numbers up to 2^53 are exact; see settings.def
  const char* fallback;  // the default as a user writes it; "" = unset
  unsigned scope;
  const char* flag;      // accordrun: "--name" takes a value, "--name=V" sets V
  const char* example;
  const char* values;    // what particular values mean
  const char* doc;

  bool has(Scope s) const { return (scope & s) != 0; }
};

// Setting ids, in the table's order: kTable[Id::FUSION_THRESHOLD].
namespace Id {
enum : std::size_t {
#define ACCORD_SETTING(id, ...) id,
#include "runtime/settings.def"
#undef ACCORD_SETTING
  kCount
};
}  // namespace Id

inline constexpr Setting kTable[] = {
#define ACCORD_SETTING(id, horovod, kind, min, max, fallback, scope, flag, field, example, \
                       values, doc)                                                        \
  {"ACCORD_" #id, horovod, Kind::kind, min, max, fallback, scope, flag, example, values, doc},
#include "runtime/settings.def"
#undef ACCORD_SETTING
};
static_assert(sizeof(kTable) / sizeof(kTable[0]) == Id::kCount);

// The setting named `name` (its ACCORD_ or its Horovod name), or nullptr.
inline const Setting* find(std::string_view name) {
  for (const auto& s : kTable)
    if (name == s.name || (*s.horovod && name == s.horovod)) return &s;
  return nullptr;
}

}  // namespace accord::settings
