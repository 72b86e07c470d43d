// Prefetching loader; see loader.h. Thread boundary: produce() runs on the producer
// thread and touches slots only while they are in neither queue; next() runs on the
// training thread. mu_ guards the queues, remaining_, handing_out_ and stopping_.
#include "loader.h"

#include "jpeg_source.h"

#include <tbb/parallel_for.h>
#include <tbb/parallel_pipeline.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace accord::resnet {

void checkLoaderMemory(const ImageSource& src, const LoaderOptions& options, int loaders) {
  const double image = 4.0 * src.channels() * src.imageSize() * src.imageSize();
  const double bytes = loaders * (options.prefetch + 1.0) * options.batch * image;
  const double memory = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGE_SIZE);
  if (memory <= 0 || bytes <= memory) return;
  char line[256];
  std::snprintf(line, sizeof line,
                "the data loader%s need%s %.1f GiB (%s%d batches of %d images of %dx%dx%d "
                "floats), more than this machine's %.1f GiB; lower --prefetch, --batch-size or "
                "--image-size",
                loaders == 1 ? "" : "s", loaders == 1 ? "s" : "", bytes / (1 << 30),
                loaders == 1 ? "" : (std::to_string(loaders) + " x ").c_str(),
                options.prefetch + 1, options.batch, src.channels(), src.imageSize(),
                src.imageSize(), memory / (1 << 30));
  throw std::invalid_argument(line);
}

Loader::Loader(const ImageSource& source, LoaderOptions options) : source_(source), opt_(options) {
  if (opt_.prefetch < 1) opt_.prefetch = 1;
  sharded_ = opt_.train && !source_.shardSizes().empty();
  if (sharded_) {
    steps_ = shardedStepsPerEpoch(source_.size(), opt_.world, opt_.batch);
  } else if (opt_.train) {
    steps_ = stepsPerEpoch(source_.size(), opt_.world, opt_.batch);
  } else {
    eval_range_ = evalShard(source_.size(), opt_.rank, opt_.world);
    const std::int64_t n = eval_range_.end - eval_range_.begin;
    steps_ = (n + opt_.batch - 1) / opt_.batch;
  }
  const std::size_t per =
      static_cast<std::size_t>(source_.channels()) * source_.imageSize() * source_.imageSize();
  arena_ = opt_.workers > 0 ? std::make_unique<tbb::task_arena>(opt_.workers)
                            : std::make_unique<tbb::task_arena>();
  // One more than the batches prepared ahead: borrow() may hold one.
  slots_.resize(static_cast<std::size_t>(opt_.prefetch) + 1);
  for (Slot& s : slots_) {
    s.x.resize(per * opt_.batch);
    s.labels.resize(opt_.batch);
    s.indices.resize(opt_.batch);
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
  first_step = std::clamp<std::int64_t>(first_step, 0, steps_);
  if (wentOnInto(epoch, first_step)) return;
  stop();
  ready_.clear();
  free_.clear();
  lent_ = -1;
  for (int i = 0; i < static_cast<int>(slots_.size()); ++i) free_.push_back(i);
  remaining_ = steps_ - first_step;
  handing_out_ = epoch;
  last_epoch_ = opt_.train && opt_.epochs > epoch ? opt_.epochs - 1 : epoch;
  stopping_ = false;
  error_ = nullptr;
  producer_ = std::thread([this, epoch, first_step] { produce(epoch, first_step); });
}

// The producer goes on into epoch e + 1 (up to last_epoch_) once e's batches are all
// under way; they are the ones wanted when e was handed out whole and e + 1 starts at
// its first step. A failure met while making them stays for take() to rethrow after
// the batches made before it, as within an epoch.
bool Loader::wentOnInto(int epoch, std::int64_t first_step) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!producer_.joinable() || stopping_ || first_step != 0 || remaining_ != 0 ||
      epoch != handing_out_ + 1 || epoch > last_epoch_)
    return false;
  if (lent_ >= 0) {
    free_.push_back(lent_);
    lent_ = -1;
  }
  remaining_ = steps_;
  handing_out_ = epoch;
  cv_.notify_all();
  return true;
}

std::shared_ptr<const std::vector<std::int64_t>> Loader::orderOf(int epoch) const {
  if (sharded_)
    return std::make_shared<const std::vector<std::int64_t>>(
        shardedEpochOrder(source_.shardSizes(), opt_.seed, epoch, opt_.rank, opt_.world));
  if (opt_.train)
    return std::make_shared<const std::vector<std::int64_t>>(
        epochOrder(source_.size(), opt_.seed, epoch));
  return nullptr;
}

std::vector<std::int64_t> Loader::indicesFor(const Job& job) const {
  if (sharded_) {
    const auto begin = job.order->begin() + job.step * opt_.batch;
    return {begin, begin + opt_.batch};
  }
  if (opt_.train) return shardBatch(*job.order, job.step, opt_.rank, opt_.world, opt_.batch);
  const std::int64_t begin = eval_range_.begin + job.step * opt_.batch;
  const std::int64_t end = std::min(begin + opt_.batch, eval_range_.end);
  std::vector<std::int64_t> idx;
  for (std::int64_t i = begin; i < end; ++i) idx.push_back(i);
  return idx;
}

// Samples are written in place in parallel; bad ones are then squeezed out, keeping
// the others in batch order. A batch that cannot be used (a bad sample without
// skip_bad, or nothing but bad ones) keeps the reason in slot.error, which the in-order
// stage throws: the epoch fails on the first such batch in step order, naming its first
// bad sample, whichever thread met a bad sample first.
void Loader::fill(Slot& slot, const Job& job) {
  if (before_fill_) before_fill_(slot.x.data());
  slot.error = nullptr;
  slot.skipped = 0;
  const std::vector<std::int64_t> idx = indicesFor(job);
  const std::size_t per = slot.x.size() / opt_.batch;
  const bool augment = opt_.train && opt_.augment;
  std::vector<std::exception_ptr> bad(idx.size());
  tbb::parallel_for(std::size_t{0}, idx.size(), [&](std::size_t i) {
    const std::uint64_t aug = mixSeed(mixSeed(opt_.seed, job.epoch), idx[i]);
    try {
      slot.labels[i] = source_.fill(idx[i], augment, aug, slot.x.data() + i * per);
    } catch (const BadRecord&) {
      bad[i] = std::current_exception();
    }
  });
  std::size_t n = 0;
  for (std::size_t i = 0; i < idx.size(); ++i) {
    if (bad[i]) {
      if (!opt_.skip_bad) {
        slot.error = bad[i];
        return;
      }
      try {
        std::rethrow_exception(bad[i]);
      } catch (const BadRecord& e) {
        std::fprintf(stderr, "accord-resnet (rank %d): skipped bad sample %lld: %s\n",
                     opt_.log_rank, static_cast<long long>(idx[i]), e.what());
      }
      continue;
    }
    if (n != i) {
      std::copy_n(slot.x.data() + i * per, per, slot.x.data() + n * per);
      slot.labels[n] = slot.labels[i];
    }
    slot.indices[n] = idx[i];
    ++n;
  }
  slot.skipped = static_cast<std::int64_t>(idx.size() - n);
  if (n == 0 && !idx.empty())
    slot.error = std::make_exception_ptr(
        DataError("every sample of the batch at step " + std::to_string(job.step) + " of epoch " +
                  std::to_string(job.epoch + 1) +
                  " was bad (see the messages above): the data is unusable"));
  slot.n = static_cast<int>(n);
}

void Loader::produce(int epoch, std::int64_t first_step) {
  try {
    produceSteps(epoch, first_step);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::current_exception();
  }
  cv_.notify_all();
}

int Loader::acquireSlot() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return stopping_ || !free_.empty(); });
  if (stopping_) return -1;
  const int slot = free_.front();
  free_.pop_front();
  return slot;
}

void Loader::publish(int slot) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ready_.push_back(slot);
  }
  cv_.notify_all();
}

// Runs on the producer thread, which joins the arena: with N workers, N threads decode.
// After the epoch's last step it goes on with the next epoch's (up to last_epoch_),
// drawing that epoch's order here rather than on the training thread. A batch that
// fails keeps its reason, thrown in step order by the last stage; a stage that throws
// cancels the pipeline and the exception comes out here.
void Loader::produceSteps(int epoch, std::int64_t first_step) {
  auto order = orderOf(epoch);
  std::int64_t step = first_step;
  arena_->execute([&] {
    tbb::parallel_pipeline(
        slots_.size(),
        tbb::make_filter<void, Job>(tbb::filter_mode::serial_in_order,
                                    [&](tbb::flow_control& fc) -> Job {
                                      if (step == steps_ && epoch < last_epoch_) {
                                        order = orderOf(++epoch);
                                        step = 0;
                                      }
                                      const int slot = step < steps_ ? acquireSlot() : -1;
                                      if (slot < 0) {
                                        fc.stop();
                                        return {};
                                      }
                                      return {slot, epoch, order, step++};
                                    }) &
            tbb::make_filter<Job, Job>(tbb::filter_mode::parallel,
                                       [&](Job job) {
                                         Slot& s = slots_[static_cast<std::size_t>(job.slot)];
                                         try {
                                           fill(s, job);
                                         } catch (...) {
                                           s.error = std::current_exception();
                                         }
                                         return job;
                                       }) &
            tbb::make_filter<Job, void>(tbb::filter_mode::serial_in_order, [&](Job job) {
              const Slot& s = slots_[static_cast<std::size_t>(job.slot)];
              if (s.error) std::rethrow_exception(s.error);
              if (filled_) filled_(s.x.data(), s.n);
              publish(job.slot);
            }));
  });
}

int Loader::take() {
  std::unique_lock<std::mutex> lock(mu_);
  if (lent_ >= 0) {
    free_.push_back(lent_);
    lent_ = -1;
    cv_.notify_all();
  }
  if (remaining_ == 0) return -1;
  if (!producer_.joinable()) throw std::logic_error("Loader::next before startEpoch");
  cv_.wait(lock, [&] { return !ready_.empty() || error_; });
  // The batches made before a failure come first: it happened after them.
  if (ready_.empty()) std::rethrow_exception(error_);
  const int slot = ready_.front();
  ready_.pop_front();
  --remaining_;
  skipped_ += slots_[static_cast<std::size_t>(slot)].skipped;
  return slot;
}

void Loader::giveBack(int slot) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(slot);
  }
  cv_.notify_all();
}

int Loader::next(float* x, std::int32_t* labels) {
  const int slot = take();
  if (slot < 0) return 0;
  Slot& s = slots_[slot];
  const std::size_t per = s.x.size() / opt_.batch;
  std::copy_n(s.x.data(), per * s.n, x);
  std::copy_n(s.labels.data(), s.n, labels);
  const int n = s.n;
  giveBack(slot);
  return n;
}

int Loader::borrow(float** x, std::int32_t* labels, std::int64_t* indices) {
  const int slot = take();
  if (slot < 0) return 0;
  Slot& s = slots_[slot];
  std::copy_n(s.labels.data(), s.n, labels);
  if (indices) std::copy_n(s.indices.data(), s.n, indices);
  *x = s.x.data();
  std::lock_guard<std::mutex> lock(mu_);
  lent_ = slot;
  return s.n;
}

}  // namespace accord::resnet
