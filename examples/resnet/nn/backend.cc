// The CPU backend's shared engine, stream, primitive cache and scratch buffers (see
// backend.h for why they exist). One process-wide instance, created on first use.
#include "nn/backend.h"

#include "nn/layers.h"

#include <oneapi/tbb/global_control.h>

#include <dlfcn.h>

#include <cstdlib>
#include <memory>

namespace accord::nn::detail {

Backend& backend() {
  static Backend instance;
  return instance;
}

float* scratch(int slot, size_t bytes) {
  auto& b = backend();
  auto it = b.scratch.find(slot);
  if (it != b.scratch.end() && b.scratch_bytes[slot] >= bytes) return it->second.get();
  size_t rounded = (bytes + 63) / 64 * 64;
  auto* p = static_cast<float*>(std::aligned_alloc(64, rounded ? rounded : 64));
  if (!p) throw Error(key("nn scratch: cannot allocate bytes", rounded));
  b.scratch.erase(slot);
  b.scratch.emplace(slot,
                    std::unique_ptr<float[], void (*)(float*)>(p, [](float* q) { std::free(q); }));
  b.scratch_bytes[slot] = rounded;
  return p;
}

Reorder::Reorder(const memory::desc& from_md, const memory::desc& to_md)
    : from(from_md), to(to_md), needed(from_md != to_md) {
  if (needed)
    prim =
        dnnl::reorder(dnnl::reorder::primitive_desc(backend().engine, from, backend().engine, to));
}

memory Reorder::into(const float* user, int slot) const {
  if (!needed) return wrap(from, user);
  memory dst(to, backend().engine, scratch(slot, to.get_size()));
  memory src = wrap(from, user);
  prim.execute(backend().stream, src, dst);
  return dst;
}

memory Reorder::out(float* user, int slot) const {
  if (!needed) return wrap(to, user);
  return memory(from, backend().engine, scratch(slot, from.get_size()));
}

void Reorder::back(const memory& produced, float* user) const {
  if (!needed) return;
  memory dst = wrap(to, user);
  prim.execute(backend().stream, const_cast<memory&>(produced), dst);
}

void execute(dnnl::primitive& p, const std::unordered_map<int, memory>& args) {
  p.execute(backend().stream, args);
}

}  // namespace accord::nn::detail

namespace accord::nn {

namespace {

// oneDNN's OpenMP runtime is linked by libdnnl, not by us: find its thread-count calls
// at run time so the trainer needs no OpenMP flags (and keeps working if oneDNN was
// built on another runtime, where they are simply absent).
template <class F>
F ompSymbol(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
}

struct Threads {
  int initial = 0;  // omp_get_max_threads() at the first call
  int current = 0;  // 0: the default
  std::unique_ptr<tbb::global_control> tbb_limit;
};

}  // namespace

int set_num_threads(int n) {
  static Threads threads;
  auto get = ompSymbol<int (*)()>("omp_get_max_threads");
  auto set = ompSymbol<void (*)(int)>("omp_set_num_threads");
  if (threads.initial == 0) threads.initial = get ? get() : 0;
  int previous = threads.current;
  threads.current = n > 0 ? n : 0;
  if (set && threads.initial > 0) set(n > 0 ? n : threads.initial);
  // oneDNN fixes a primitive's thread count when it is created: drop ours so the next
  // calls build (or fetch from oneDNN's own cache, keyed by thread count) fresh ones.
  detail::backend().cache.clear();
  threads.tbb_limit.reset();
  if (n > 0)
    threads.tbb_limit = std::make_unique<tbb::global_control>(
        tbb::global_control::max_allowed_parallelism, static_cast<size_t>(n));
  return previous;
}

void clear_primitive_cache() { detail::backend().cache.clear(); }
size_t primitive_cache_size() { return detail::backend().cache.size(); }

}  // namespace accord::nn
