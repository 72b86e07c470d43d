// What the trainer feeds the model: image sources (Fashion-MNIST, synthetic; JPEG
// folders and packed records in jpeg_source.h) and the sharding rules that decide
// which samples each rank sees at each step.
//
// Sharding: every epoch all ranks compute the same permutation of the training set
// from the shared seed and the epoch number. Step s of the epoch covers the global
// batch order[s*G, (s+1)*G) with G = size * batch, and rank r takes its slice
// [s*G + r*batch, s*G + (r+1)*batch). So the ranks' shards are disjoint, every rank
// runs floor(n / G) steps, and 2 ranks with batch B see exactly the samples 1 rank
// with batch 2B sees (the data-parallel equivalence test relies on that).
// Augmentation draws from a generator seeded by (seed, epoch, sample index), never by
// rank, for the same reason.
// Packed records follow shardedEpochOrder instead: each rank reads its own shards in
// order, which a global permutation would scatter; the price is that the partition,
// and so the samples of a step, depend on the rank count.
#pragma once

#include "idx.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace accord::resnet {

// A source of labelled images, normalised to float, at a fixed output size.
class ImageSource {
 public:
  virtual ~ImageSource() = default;
  virtual std::int64_t size() const = 0;
  virtual int channels() const = 0;
  virtual int imageSize() const = 0;  // output H = W
  virtual int classes() const = 0;
  // Writes sample `index` into out (C, S, S) and returns its label. With augment, a
  // random crop (padding 2) and horizontal flip drawn from aug_seed.
  // Photos (jpeg_source.h) instead draw a random-resized crop, and throw BadRecord for
  // a sample that cannot be used. Called from several threads at once.
  virtual std::int32_t fill(std::int64_t index, bool augment, std::uint64_t aug_seed,
                            float* out) const = 0;
  // Class names by label, where the data names them (train and test must agree).
  virtual std::vector<std::string> classNames() const { return {}; }
  // Sources stored in shard files: how many consecutive samples each shard holds.
  // Empty: every sample is as cheap to reach as any other.
  virtual std::vector<std::int64_t> shardSizes() const { return {}; }
};

// Fashion-MNIST (28x28 grey); centred with zero padding when image_size > 28.
std::unique_ptr<ImageSource> makeFashionMnist(const std::string& dir, bool train, int image_size,
                                              std::int64_t limit = 0);
// Random images (throughput benchmark): n samples, a small pool of fixed random images
// reused, labels index % classes.
std::unique_ptr<ImageSource> makeSynthetic(std::int64_t n, int channels, int image_size,
                                           int classes, std::uint64_t seed);
// The images a synthetic source draws from: sample i is image i % images of `pixels`,
// (images, C, S, S) floats that live as long as the source (and never augmented).
// nullopt for any other source.
struct SyntheticPool {
  const float* pixels = nullptr;
  int images = 0;
};
std::optional<SyntheticPool> syntheticPool(const ImageSource& source);

// ---- sharding (pure, tested) ------------------------------------------------------------

std::uint64_t mixSeed(std::uint64_t a, std::uint64_t b);  // splitmix64 of a combination
// Training steps per epoch, the same on every rank; throws if not even one.
std::int64_t stepsPerEpoch(std::int64_t n, int world, int batch);
// The epoch's order of the training set, identical on every rank.
std::vector<std::int64_t> epochOrder(std::int64_t n, std::uint64_t seed, int epoch);
// The samples rank `rank` trains on at `step` of an epoch with this order.
std::vector<std::int64_t> shardBatch(const std::vector<std::int64_t>& order, std::int64_t step,
                                     int rank, int world, int batch);
// Sharded sources, where a rank should read its own shards front to back: every epoch
// the shards are put in an order drawn from (seed, epoch), rank r takes the r-th
// contiguous part [n*r/world, n*(r+1)/world) of their records in that order, and the
// part is shuffled within windows of `window` consecutive records (the windows'
// boundaries shifted every epoch), so reads stay near each other in a shard while
// batches mix. Ranks' parts are disjoint; every rank computes all of it alike.
std::vector<std::int64_t> shardedEpochOrder(const std::vector<std::int64_t>& shard_sizes,
                                            std::uint64_t seed, int epoch, int rank, int world,
                                            std::int64_t window = 1024);
// Training steps per epoch with shardedEpochOrder: the smallest part's full batches.
std::int64_t shardedStepsPerEpoch(std::int64_t n, int world, int batch);
// Evaluation: every sample once; rank r gets the r-th contiguous part [begin, end).
struct Range {
  std::int64_t begin = 0, end = 0;
};
Range evalShard(std::int64_t n, int rank, int world);

}  // namespace accord::resnet
