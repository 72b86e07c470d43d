// ACCORD_* environment variables (config.h), parsed and validated once at init, all from
// the table in runtime/settings.def.
//
// Every rejection names the variable, the value as given and the accepted range, so
// a typo in a job script fails at init on every rank with a message that says what
// to write instead. A variable set to the empty string counts as unset, which is
// what `ACCORD_X= mpirun ...` means to most users.
//
// forEachField() is where the table meets Config: it hands each setting, its scope and
// a reference to its field (or a small view of two fields) to a visitor; parse,
// describe and mustAgree are such visitors, picking by the field's type what to do.
#include "runtime/config.h"

#include "runtime/config_reader.h"
#include "runtime/settings.h"

#include <accord/error.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <type_traits>

namespace accord {

namespace {

using namespace config_reader;
using namespace settings;  // the table, and the scope flags and bounds settings.def names

// A field and the flag that records whether its setting was set explicitly.
template <class T, class B>
struct WithGiven {
  T& value;
  B& given;
};
template <class T, class B>
WithGiven<T, B> withGiven(T& value, B& given) {
  return {value, given};
}
// A setting of levels 0..2 kept as two flags: `low` for >= 1, `high` for 2.
template <class B>
struct Levels {
  B& low;
  B& high;
};
template <class B>
Levels<B> levels(B& low, B& high) {
  return {low, high};
}
template <class T>
struct IsWithGiven : std::false_type {};
template <class T, class B>
struct IsWithGiven<WithGiven<T, B>> : std::true_type {};

// Calls f(setting, scope, field) for every setting, in the table's order; `scope` is a
// std::integral_constant, so a visitor can choose at compile time by it.
template <class C, class F>
void forEachField(C& c, F&& f) {
#define ACCORD_FIELD(name) c.name
#define ACCORD_WITH_GIVEN(name, flag) withGiven(c.name, c.flag)
#define ACCORD_LEVELS(low, high) levels(c.low, c.high)
#define ACCORD_SETTING(id, horovod, kind, min, max, fallback, scope, flag, field, example, \
                       values, doc)                                                        \
  f(kTable[Id::id], std::integral_constant<unsigned, (scope)>{}, field);
#include "runtime/settings.def"
#undef ACCORD_SETTING
#undef ACCORD_LEVELS
#undef ACCORD_WITH_GIVEN
#undef ACCORD_FIELD
}

// Storing a parsed value in its field, by the field's type.
void assign(std::size_t& f, const Value& v) { f = std::get<std::uint64_t>(v); }
void assign(bool& f, const Value& v) { f = std::get<std::uint64_t>(v) != 0; }
void assign(std::string& f, const Value& v) { f = std::get<std::string>(v); }
void assign(std::chrono::microseconds& f, const Value& v) {
  f = std::chrono::microseconds(std::llround(std::get<double>(v) * 1000.0));
}
void assign(std::chrono::milliseconds& f, const Value& v) {
  f = std::chrono::milliseconds(std::llround(std::get<double>(v) * 1000.0));
}
void assign(Levels<bool> f, const Value& v) {
  f.low = std::get<std::uint64_t>(v) >= 1;
  f.high = std::get<std::uint64_t>(v) == 2;
}
template <class T>
void assign(WithGiven<T, bool> f, const Value& v) {
  assign(f.value, v);
}

// A field as a number (for the agreement check) and as text (for describe()).
std::uint64_t number(std::size_t f) { return f; }
std::uint64_t number(bool f) { return f ? 1 : 0; }
std::uint64_t number(Levels<const bool> f) { return number(f.low) + number(f.high); }
template <class T>
std::uint64_t number(WithGiven<T, const bool> f) {
  return number(f.value);
}
std::string text(const Setting& s, std::size_t f) {
  return std::to_string(f) + (s.kind == Kind::Bytes ? " bytes" : "");
}
std::string text(const Setting&, bool f) { return f ? "1" : "0"; }
std::string text(const Setting&, Levels<const bool> f) { return std::to_string(number(f)); }
std::string text(const Setting&, const std::string& f) { return f; }
std::string text(const Setting&, std::chrono::microseconds f) {
  return formatNumber(std::chrono::duration<double, std::milli>(f).count()) + " ms";
}
std::string text(const Setting&, std::chrono::milliseconds f) {
  return formatNumber(std::chrono::duration<double>(f).count()) + " s";
}
template <class T>
std::string text(const Setting& s, WithGiven<T, const bool> f) {
  return text(s, f.value);
}

// Where a time is kept to its resolution and was given finer, the value as given.
std::string finerThanKept(const Setting& s, const Value& v) {
  if (s.kind != Kind::Milliseconds && s.kind != Kind::Seconds) return "";
  const double given = std::get<double>(v);
  const double kept = std::round(given / s.min) * s.min;
  return std::fabs(kept - given) > 1e-9 * std::max(1.0, given) ? formatNumber(given) : "";
}

// ACCORD_AUTOTUNE_START="ACCORD_FUSION_THRESHOLD=4K ACCORD_CYCLE_TIME=5": where the
// tuner starts the settings it tunes (kTuned), for experiments from a chosen (bad)
// point. Each value is checked as the variable itself would be; a setting given
// explicitly is not tuned, so naming it here is an error.
void applyAutotuneStart(Config& c, const Reader& env) {
  const Setting& self = kTable[Id::AUTOTUNE_START];
  const std::string& text = c.autotune_start;
  if (text.empty()) return;
  if (!c.autotune) {
    throw InvalidArgument(std::string(self.name) + "='" + text +
                          "' is only read with ACCORD_AUTOTUNE=1, which is not set");
  }
  std::vector<std::pair<std::string, std::string>> entries;
  std::string item;
  auto flush = [&] {
    if (item.empty()) return;
    const auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0) reject(self.name, text, expected(self));
    entries.emplace_back(item.substr(0, eq), item.substr(eq + 1));
    item.clear();
  };
  for (char ch : text) {
    if (ch == ' ' || ch == ',' || ch == '\t') {
      flush();
    } else {
      item += ch;
    }
  }
  flush();
  for (const auto& [name, value] : entries) {
    const Setting* s = settings::find(name);
    if (s == nullptr || s->name != name || !s->has(kTuned)) reject(self.name, text, expected(self));
    if (env.given(*s)) {
      throw InvalidArgument(std::string(self.name) + " names " + name +
                            ", which is also set explicitly and so is not tuned: unset one");
    }
  }
  Config::Getenv lookup = [&entries](const char* var) -> const char* {
    for (const auto& [name, value] : entries)
      if (name == var) return value.c_str();
    return nullptr;
  };
  const Reader start(lookup);
  try {
    forEachField(c, [&](const Setting& s, auto scope, auto&& field) {
      if constexpr ((scope() & kTuned) != 0) {
        if (start.given(s)) assign(field.value, start.value(s));  // still tuned: not given
      }
    });
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(std::string(self.name) + ": " + e.what());
  }
}

}  // namespace

Config Config::parse(const Getenv& getenv) {
  const Reader env(getenv);
  Config c;
  forEachField(c, [&](const Setting& s, auto scope, auto&& field) {
    const Value v = env.value(s);
    assign(field, v);
    if constexpr ((scope() & (kTuned | kGivenAgrees)) != 0) {
      static_assert(IsWithGiven<std::decay_t<decltype(field)>>::value,
                    "a kTuned or kGivenAgrees setting records whether it was set: "
                    "ACCORD_WITH_GIVEN");
      field.given = env.given(s);
    }
    if (const std::string given = finerThanKept(s, v); !given.empty()) c.rounded[s.name] = given;
  });
  // Horovod's HOROVOD_TIMELINE=DYNAMIC: nothing recorded from init(); start_timeline()
  // records later, which Accord always allows. Not a file named DYNAMIC.
  if (c.timeline == "DYNAMIC") c.timeline.clear();
  applyAutotuneStart(c, env);
  return c;
}

Config Config::fromEnvironment() {
  return parse([](const char* var) -> const char* { return std::getenv(var); });
}

// One line per setting: its effective value, then what it does and accepts.
std::string Config::describe() const {
  std::string out;
  forEachField(*this, [&](const Setting& s, auto, auto&& field) {
    std::string value = text(s, field);
    if (value.empty()) value = std::string("(") + s.values + ")";  // an unset text
    if (auto it = rounded.find(s.name); it != rounded.end())
      value += " (given " + it->second + ", kept to the " + resolutionName(s.kind) + ")";
    std::string line = std::string(s.name) + "=" + value;
    line.resize(std::max<std::size_t>(line.size() + 2, 44), ' ');
    out += line + s.doc + " (" + range(s) + ")\n";
  });
  return out;
}

std::vector<std::pair<std::string, std::uint64_t>> Config::mustAgree() const {
  std::vector<std::pair<std::string, std::uint64_t>> values, given_ones;
  forEachField(*this, [&](const Setting& s, auto scope, auto&& field) {
    const std::string name = s.name;
    if constexpr ((scope() & kAgree) != 0)
      values.emplace_back(name, s.has(kAutotuneOnly) && !autotune ? 0 : number(field));
    if constexpr ((scope() & kGivenAgrees) != 0)
      given_ones.emplace_back(name + " (set, or left to its default)", field.given);
    if constexpr ((scope() & kTuned) != 0) {
      given_ones.emplace_back(name + " (set, or left to ACCORD_AUTOTUNE)",
                              autotune && field.given);
    }
  });
  values.insert(values.end(), given_ones.begin(), given_ones.end());
  return values;
}

const std::vector<std::string>& Config::knownVariables() {
  static const std::vector<std::string> known = [] {
    std::vector<std::string> names;
    for (const auto& s : kTable) names.emplace_back(s.name);
    return names;
  }();
  return known;
}

std::vector<std::string> Config::unknownVariables(const std::vector<std::string>& environment) {
  // Read by Accord's build scripts, tests and trainer, not by the runtime, but not
  // typos either.
  static const std::vector<std::string> tooling = {"ACCORD_BUILD_DIR",
                                                   "ACCORD_JOBS",
                                                   "ACCORD_TEST_WAIT_SECONDS",
                                                   "ACCORD_TEST_TIME_SCALE",
                                                   "ACCORD_PROGRESS",
                                                   "ACCORD_TORCH2_VENV",
                                                   "ACCORD_TEST_BUILT_CUDA_NCCL",
                                                   "ACCORD_TEST_MPIRUN"};
  std::vector<std::string> unknown;
  for (const auto& entry : environment) {
    const std::string name = entry.substr(0, entry.find('='));
    if (name.rfind("ACCORD_", 0) != 0) continue;
    const auto* s = settings::find(name);
    const bool known = s != nullptr && s->name == name;
    if (!known && std::find(tooling.begin(), tooling.end(), name) == tooling.end())
      unknown.push_back(name);
  }
  std::sort(unknown.begin(), unknown.end());
  unknown.erase(std::unique(unknown.begin(), unknown.end()), unknown.end());
  return unknown;
}

namespace {

// Horovod's runtime settings (horovod/common/common.h) with no Accord counterpart, and
// for some what Accord does instead; those it has, it reads (settings.def's column).
struct HorovodSetting {
  const char* name;
  const char* instead;  // "" : no counterpart
};
constexpr const char* kOwnAutotune = "Accord's autotuner has a schedule of its own "
                                     "(docs/autotune.md)";
constexpr HorovodSetting kUnreadHorovodSettings[] = {
    {"HOROVOD_ADASUM_MPI_CHUNK_SIZE", ""},
    {"HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", kOwnAutotune},
    {"HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", kOwnAutotune},
    {"HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", kOwnAutotune},
    {"HOROVOD_AUTOTUNE_WARMUP_SAMPLES", kOwnAutotune},
    {"HOROVOD_BATCH_D2D_MEMCOPIES", ""},
    {"HOROVOD_CCL_CACHE", "Accord does not run over oneCCL"},
    {"HOROVOD_CONTROLLER", "Accord negotiates over MPI, always"},
    {"HOROVOD_CPU_OPERATIONS", "Accord reduces host tensors over MPI, or through shared memory "
                               "between the ranks of a host (ACCORD_SHARED_MEMORY)"},
    {"HOROVOD_DISABLE_GROUP_FUSION", ""},
    {"HOROVOD_DISABLE_NVTX_RANGES", ""},
    {"HOROVOD_DYNAMIC_PROCESS_SETS", "Accord adds process sets after init() in any case"},
    {"HOROVOD_ELASTIC", "elastic jobs are accordrun's (--min-np, --host-discovery-script: "
                        "docs/elastic.md)"},
    {"HOROVOD_ENABLE_ASYNC_COMPLETION", ""},
    {"HOROVOD_ENABLE_XLA_OPS", ""},
    {"HOROVOD_GLOO_IFACE", "Accord runs over MPI, not Gloo"},
    {"HOROVOD_GLOO_TIMEOUT_SECONDS", "Accord runs over MPI, not Gloo"},
    {"HOROVOD_HIERARCHICAL_ALLGATHER", ""},
    {"HOROVOD_LOG_HIDE_TIME", "Accord's log lines always carry the time"},
    {"HOROVOD_MPI_THREADS_DISABLE", "Accord asks for MPI_THREAD_MULTIPLE where it initializes "
                                    "MPI itself"},
    {"HOROVOD_NUM_NCCL_STREAMS", ""},
    {"HOROVOD_STALL_CHECK_DISABLE", "Accord always watches for stalls: ACCORD_STALL_CHECK_TIME "
                                    "says when they are reported, ACCORD_STALL_SHUTDOWN_TIME=0 "
                                    "lets stalled tensors wait for ever"},
    {"HOROVOD_THREAD_AFFINITY", ""},
    {"HOROVOD_TIMELINE_MARK_CYCLES", "Accord's timeline always marks the cycles"},
    {"HOROVOD_TORUS_ALLREDUCE", ""},
};

}  // namespace

std::vector<std::string> Config::unreadHorovodVariables(
    const std::vector<std::string>& environment) {
  std::vector<std::string> notes;
  for (const auto& h : kUnreadHorovodSettings) {
    const std::string prefix = std::string(h.name) + "=";
    const bool set = std::any_of(environment.begin(), environment.end(), [&](const auto& e) {
      return e.rfind(prefix, 0) == 0 && e.size() > prefix.size();  // empty counts as unset
    });
    if (!set) continue;
    notes.push_back(std::string(h.name) + " is a Horovod setting Accord does not read: " +
                    (*h.instead ? h.instead : "Accord has no counterpart"));
  }
  return notes;
}

}  // namespace accord
