// The CPU backend's shared state, private to nn/*.cc: one oneDNN engine and stream, a
// cache of primitives keyed by layer kind, shape and mode, and scratch buffers for the
// blocked layouts convolutions run in.
//
// Why a cache: creating a oneDNN primitive descriptor and JIT-compiling its kernel
// costs far more than running a small layer, and a ResNet repeats a few shapes many
// times, so one entry serves every layer of that shape. Why scratch: convolutions are
// ~2x faster in oneDNN's blocked layouts (nChw16c on AVX-512) than on plain NCHW even
// counting the reorders, but the interface keeps NCHW, so each conv reorders in and out
// through a few buffers shared by all layers (calls are sequential, see layers.h).
#pragma once

#include <accord/error.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <memory>
#include <sstream>
#include <string>
#include <unordered_map>

namespace accord::nn::detail {

using dnnl::memory;
using Tag = memory::format_tag;
constexpr auto kF32 = memory::data_type::f32;

struct Backend {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::unordered_map<std::string, std::shared_ptr<void>> cache;
  std::unordered_map<int, std::unique_ptr<float[], void (*)(float*)>> scratch;
  std::unordered_map<int, size_t> scratch_bytes;
};
Backend& backend();

// Scratch slot `slot`, at least `bytes` long, 64-byte aligned; grows, never shrinks.
float* scratch(int slot, size_t bytes);

// The cached plan under `key`, made by make() on first use. T must be the same type for
// the same key (the key starts with the layer kind).
template <class T, class Make>
T& cached(const std::string& key, Make&& make) {
  auto& slot = backend().cache[key];
  if (!slot) slot = std::make_shared<T>(make());
  return *static_cast<T*>(slot.get());
}

// "conv2d 32 64 56 56 ..." from the arguments, for cache keys and error messages.
template <class... Args>
std::string key(const char* kind, const Args&... args) {
  std::ostringstream os;
  os << kind;
  ((os << ' ' << args), ...);
  return os.str();
}

// Runs f(); a oneDNN failure becomes accord::Error naming the call site.
template <class F>
auto guarded(const std::string& what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const dnnl::error& e) {
    throw Error(what + ": oneDNN failed: " + e.what() + " (status " +
                std::to_string(static_cast<int>(e.status)) + ")");
  }
}

// A plain dense descriptor: dims with tag (nchw, oihw, nc, x, ...).
inline memory::desc plain(const memory::dims& dims, Tag tag) {
  return memory::desc(dims, kF32, tag);
}
// A memory object over a caller's buffer (oneDNN takes non-const handles).
inline memory wrap(const memory::desc& md, const float* p) {
  return memory(md, backend().engine, const_cast<float*>(p));
}

// A reorder between a user's plain layout and the layout a primitive chose; a no-op
// when they agree. into() brings a user buffer into the primitive's layout (through a
// scratch slot); out() gives the memory the primitive writes and back() copies it to
// the user's buffer.
struct Reorder {
  memory::desc from, to;
  bool needed = false;
  dnnl::reorder prim;

  Reorder() = default;
  Reorder(const memory::desc& from_md, const memory::desc& to_md);
  memory into(const float* user, int slot) const;        // user (from) -> to
  memory out(float* user, int slot) const;               // where to write (layout `from`)
  void back(const memory& produced, float* user) const;  // produced (from) -> user (to)
};

void execute(dnnl::primitive& p, const std::unordered_map<int, memory>& args);

}  // namespace accord::nn::detail
