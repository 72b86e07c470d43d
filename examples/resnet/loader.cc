// Prefetching loader; see loader.h. Thread boundary: produce() runs on the producer
// thread and touches slots only while they are in neither queue; next() runs on the
// training thread. mu_ guards the queues, remaining_ and stopping_.
#include "loader.h"

#include <tbb/parallel_for.h>

#include <algorithm>
#include <stdexcept>

namespace accord::resnet {

Loader::Loader(const ImageSource& source, LoaderOptions options) : source_(source), opt_(options) {
  if (opt_.prefetch < 1) opt_.prefetch = 1;
  if (opt_.train) {
    steps_ = stepsPerEpoch(source_.size(), opt_.world, opt_.batch);
  } else {
    eval_range_ = evalShard(source_.size(), opt_.rank, opt_.world);
    const std::int64_t n = eval_range_.end - eval_range_.begin;
    steps_ = (n + opt_.batch - 1) / opt_.batch;
  }
  const std::size_t per =
      static_cast<std::size_t>(source_.channels()) * source_.imageSize() * source_.imageSize();
  slots_.resize(static_cast<std::size_t>(opt_.prefetch));
  for (Slot& s : slots_) {
    s.x.resize(per * opt_.batch);
    s.labels.resize(opt_.batch);
  }
}

Loader::~Loader() { stop(); }

void Loader::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (producer_.joinable()) producer_.join();
}

void Loader::startEpoch(int epoch, std::int64_t first_step) {
  stop();
  epoch_ = epoch;
  if (opt_.train) order_ = epochOrder(source_.size(), opt_.seed, epoch);
  first_step = std::clamp<std::int64_t>(first_step, 0, steps_);
  ready_.clear();
  free_.clear();
  for (int i = 0; i < static_cast<int>(slots_.size()); ++i) free_.push_back(i);
  remaining_ = steps_ - first_step;
  stopping_ = false;
  error_ = nullptr;
  producer_ = std::thread([this, first_step] { produce(first_step); });
}

std::vector<std::int64_t> Loader::indicesFor(std::int64_t step) const {
  if (opt_.train) return shardBatch(order_, step, opt_.rank, opt_.world, opt_.batch);
  const std::int64_t begin = eval_range_.begin + step * opt_.batch;
  const std::int64_t end = std::min(begin + opt_.batch, eval_range_.end);
  std::vector<std::int64_t> idx;
  for (std::int64_t i = begin; i < end; ++i) idx.push_back(i);
  return idx;
}

void Loader::fill(Slot& slot, std::int64_t step) {
  const std::vector<std::int64_t> idx = indicesFor(step);
  const std::size_t per = slot.x.size() / opt_.batch;
  const bool augment = opt_.train && opt_.augment;
  tbb::parallel_for(std::size_t{0}, idx.size(), [&](std::size_t i) {
    const std::uint64_t aug = mixSeed(mixSeed(opt_.seed, epoch_), idx[i]);
    slot.labels[i] = source_.fill(idx[i], augment, aug, slot.x.data() + i * per);
  });
  slot.n = static_cast<int>(idx.size());
}

void Loader::produce(std::int64_t first_step) {
  try {
    produceSteps(first_step);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::current_exception();
  }
  cv_.notify_all();
}

void Loader::produceSteps(std::int64_t first_step) {
  for (std::int64_t step = first_step; step < steps_; ++step) {
    int slot;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !free_.empty(); });
      if (stopping_) return;
      slot = free_.front();
      free_.pop_front();
    }
    fill(slots_[slot], step);
    {
      std::lock_guard<std::mutex> lock(mu_);
      ready_.push_back(slot);
    }
    cv_.notify_all();
  }
}

int Loader::next(float* x, std::int32_t* labels) {
  int slot;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (remaining_ == 0) return 0;
    if (!producer_.joinable()) throw std::logic_error("Loader::next before startEpoch");
    cv_.wait(lock, [&] { return !ready_.empty() || error_; });
    if (error_) std::rethrow_exception(error_);
    slot = ready_.front();
    ready_.pop_front();
    --remaining_;
  }
  Slot& s = slots_[slot];
  const std::size_t per = s.x.size() / opt_.batch;
  std::copy_n(s.x.data(), per * s.n, x);
  std::copy_n(s.labels.data(), s.n, labels);
  const int n = s.n;
  {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(slot);
  }
  cv_.notify_all();
  return n;
}

}  // namespace accord::resnet
