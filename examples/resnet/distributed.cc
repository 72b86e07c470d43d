// See distributed.h.
#include "distributed.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>

namespace accord::resnet {
namespace {

bool single() { return accord::size() == 1; }

std::unique_ptr<tbb::task_arena>& computeArenaSlot() {
  static std::unique_ptr<tbb::task_arena> arena;
  return arena;
}

TensorView view(void* data, DType dtype, std::size_t n) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.shape = {static_cast<std::int64_t>(n)};
  return v;
}

}  // namespace

void GradExchange::average(const std::string& name, TensorView v, bool on_device) {
  if (world_ == 1) return;
  AllreduceOptions o;
  o.name = name;
  o.op = ReduceOp::Average;
  if (on_device) {
    v.device = Device::cuda(device_);
    o.stream = stream_;
  }
  handles_.push_back(allreduce_async(v, o));
}

void GradExchange::submit(const std::string& name, float* grad, std::size_t n) {
  average("grad." + name, view(grad, DType::Float32, n), device_ >= 0);
}

void GradExchange::submitValue(const std::string& name, double* value) {
  average(name, view(value, DType::Float64, 1), false);
}

void GradExchange::submitDeviceValue(const std::string& name, float* value) {
  if (device_ < 0) throw Error("GradExchange::submitDeviceValue: no GPU (onDevice)");
  average(name, view(value, DType::Float32, 1), true);
}

double GradExchange::waitAll() {
  const auto t0 = std::chrono::steady_clock::now();
  for (const Handle& h : handles_) h.wait();
  handles_.clear();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void broadcastFloats(float* data, std::size_t n, const std::string& name) {
  if (single() || n == 0) return;
  BroadcastOptions o;
  o.name = name;
  broadcast(view(data, DType::Float32, n), o);
}

void broadcastArena(const nn::Arena& arena, const std::string& name) {
  broadcastFloats(arena.base, arena.capacity, name);
}

void averageFloats(float* data, std::size_t n, const std::string& name) {
  if (single() || n == 0) return;
  AllreduceOptions o;
  o.name = name;
  o.op = ReduceOp::Average;
  allreduce(view(data, DType::Float32, n), o);
}

void sumDoubles(std::vector<double>& values, const std::string& name) {
  if (single() || values.empty()) return;
  AllreduceOptions o;
  o.name = name;
  allreduce(view(values.data(), DType::Float64, values.size()), o);
}

void broadcastInts(std::vector<std::int64_t>& values, const std::string& name) {
  if (single() || values.empty()) return;
  BroadcastOptions o;
  o.name = name;
  broadcast(view(values.data(), DType::Int64, values.size()), o);
}

std::string broadcastError(const std::string& error_on_root) {
  if (single()) return error_on_root;
  std::vector<unsigned char> buf(1024, 0);  // long enough for any message we write
  std::memcpy(buf.data(), error_on_root.data(), std::min(error_on_root.size(), buf.size() - 1));
  BroadcastOptions o;
  o.name = "trainer.status";
  broadcast(view(buf.data(), DType::UInt8, buf.size()), o);
  return reinterpret_cast<const char*>(buf.data());
}

void setThreads(int threads) {
  threads = std::max(threads, 1);
  // oneDNN (Debian's build) runs on OpenMP. The trainer does not link OpenMP itself,
  // so find omp_set_num_threads in the already loaded libgomp rather than depend on
  // OMP_NUM_THREADS, which libgomp reads before main() runs.
  using SetFn = void (*)(int);
  if (auto fn = reinterpret_cast<SetFn>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"))) fn(threads);
  computeArenaSlot() = std::make_unique<tbb::task_arena>(threads);
}

tbb::task_arena& computeArena() {
  auto& arena = computeArenaSlot();
  if (!arena) arena = std::make_unique<tbb::task_arena>(1);
  return *arena;
}

}  // namespace accord::resnet
