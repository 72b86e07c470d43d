// Batches for one rank, prepared ahead of the training loop.
//
// A producer thread runs a oneTBB pipeline in an arena of `workers` threads: a serial
// stage hands out steps and free batch buffers, a parallel stage decodes and augments
// a batch (its samples again in parallel), a serial stage publishes finished batches
// in step order. The loader owns prefetch + 1 batch buffers: with borrow(), `prefetch`
// batches are in flight or waiting while the model reads the one lent to it (next(),
// which copies, lets the producer run one batch further ahead). The training thread
// takes finished batches without copying them, and the time it waits for one is the
// "data wait" the metrics report.
//
// With `epochs` set, a training loader does not stop at the end of an epoch: once the
// epoch's last batch is under way it goes on with the next epoch's first ones, so that
// startEpoch(e + 1) finds them ready instead of the step waiting for a whole batch to
// be decoded while the workers start up (at 7,000 img/s that wait is a large part of a
// short epoch). The batches are the same either way: each follows from the seed, the
// epoch and its samples alone.
//
// A sample the source cannot use (BadRecord) is reported on stderr with its file and
// offset and either dropped from its batch and counted (skip_bad), or fails the run
// (next() rethrows it). It is never replaced by something made up.
#pragma once

#include "data.h"

#include <tbb/task_arena.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace accord::resnet {

struct LoaderOptions {
  int batch = 32;  // per rank
  int rank = 0, world = 1;
  std::uint64_t seed = 0;  // shared by all ranks
  bool train = true;       // train: shuffled shard, augmented, full batches only
  bool augment = true;
  int prefetch = 2;  // batches prepared ahead
  int workers = 0;   // decode threads; 0: oneTBB's default (the cores)
  bool skip_bad = false;
  int log_rank = 0;  // names the rank in messages about bad samples
  // Training: the epochs of the run; the producer goes on into epoch e + 1 while e's
  // last batches are used, up to this count. 0: each epoch starts the pipeline afresh.
  int epochs = 0;
};

// `loaders` loaders over `src` hold --prefetch + 1 batches each as float32: more than
// the machine has would end in std::bad_alloc, or in the kernel's OOM killer. Throws
// std::invalid_argument naming the sizes and the flags that lower them.
void checkLoaderMemory(const ImageSource& src, const LoaderOptions& options, int loaders);

class Loader {
 public:
  Loader(const ImageSource& source, LoaderOptions options);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Steps in an epoch: the same on every rank when training; evaluation covers this
  // rank's part of the set, the last batch possibly partial.
  std::int64_t steps() const { return steps_; }
  // Starts producing the epoch's batches from step first_step (resuming mid-epoch), or,
  // where the producer already went on into them (`epochs`), hands out those.
  void startEpoch(int epoch, std::int64_t first_step = 0);
  // Copies the next batch into x (N, C, S, S) and labels (N); returns N, 0 at the end.
  // With skip_bad a batch can be short; a batch of nothing but bad samples throws.
  int next(float* x, std::int32_t* labels);
  // next() without the copy of the images: *x points at the loader's own buffer, which
  // stays as it is until the following borrow(), next() or startEpoch(). The training
  // loop feeds the model straight from it (a batch of 224x224 images is 77 MB per 128).
  // `indices`, where given, receives the batch's sample indices in the source (N).
  int borrow(float** x, std::int32_t* labels, std::int64_t* indices = nullptr);
  // Calls f(data, floats) for every image buffer borrow() can hand out, e.g. to
  // page-lock them for copies to a GPU. Not while an epoch is running.
  template <class F>
  void forEachBuffer(F&& f) {
    for (Slot& s : slots_) f(s.x.data(), s.x.size());
  }
  // Tells a consumer of the image buffers (a GPU copying batches ahead) about their
  // life, on the loader's own threads: before_fill(x) before buffer x is written again,
  // filled(x, n) once it holds a batch of n, before borrow() can hand it out. Either may
  // be empty. Not while an epoch is running.
  void watchBuffers(std::function<void(const float*)> before_fill,
                    std::function<void(const float*, int)> filled) {
    before_fill_ = std::move(before_fill);
    filled_ = std::move(filled);
  }
  // Stops the producer, waiting for a batch being filled (startEpoch starts it again).
  void stop();
  // Bad samples skipped so far, over all epochs, in the batches handed out.
  std::int64_t skipped() const { return skipped_.load(); }

 private:
  struct Slot {
    std::vector<float> x;
    std::vector<std::int32_t> labels;
    std::vector<std::int64_t> indices;  // of the samples kept, in the source
    int n = 0;
    std::int64_t skipped = 0;  // bad samples dropped from it
    std::exception_ptr error;  // why the batch cannot be used, thrown in step order
  };
  // A batch to make: its epoch, that epoch's order (train) and its step.
  struct Job {
    int slot = -1;
    int epoch = 0;
    std::shared_ptr<const std::vector<std::int64_t>> order;
    std::int64_t step = 0;
  };
  std::shared_ptr<const std::vector<std::int64_t>> orderOf(int epoch) const;
  std::vector<std::int64_t> indicesFor(const Job& job) const;
  void produce(int epoch, std::int64_t first_step);  // the producer thread's body
  void produceSteps(int epoch, std::int64_t first_step);
  void fill(Slot& slot, const Job& job);
  // Whether the running producer is already making epoch's batches from its first step.
  bool wentOnInto(int epoch, std::int64_t first_step);
  int acquireSlot();  // blocks; -1 when stopping
  void publish(int slot);
  // The next ready slot (its batch size in n), or -1 at the end of the epoch; the slot
  // lent by the last borrow() goes back to the producer first.
  int take();
  void giveBack(int slot);

  const ImageSource& source_;
  LoaderOptions opt_;
  std::int64_t steps_ = 0;
  bool sharded_ = false;  // the orders are this rank's own part (shardedEpochOrder)
  std::unique_ptr<tbb::task_arena> arena_;
  std::atomic<std::int64_t> skipped_{0};
  Range eval_range_;

  std::vector<Slot> slots_;
  std::function<void(const float*)> before_fill_;  // watchBuffers
  std::function<void(const float*, int)> filled_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<int> ready_, free_;  // slot indices
  int lent_ = -1;                 // the slot borrow() handed out, if any
  std::int64_t remaining_ = 0;    // batches of this epoch not yet handed out
  int handing_out_ = -1;          // the epoch take() hands out
  int last_epoch_ = -1;           // the last epoch the producer makes batches of
  bool stopping_ = false;
  std::exception_ptr error_;  // a failure on the producer thread, rethrown by next()
  std::thread producer_;      // runs produce(); joined by startEpoch and the destructor
};

}  // namespace accord::resnet
