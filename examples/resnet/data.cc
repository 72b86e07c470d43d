// Image sources and the sharding rule; see data.h.
#include "data.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <stdexcept>

namespace accord::resnet {
namespace {

// Fashion-MNIST's training-set pixel statistics (x / 255), as commonly used.
constexpr float kFashionMean = 0.2860f;
constexpr float kFashionStd = 0.3530f;
constexpr int kCropPad = 2;  // random crop of a 2-pixel zero-padded image (small images)

class FashionMnistSource : public ImageSource {
 public:
  FashionMnistSource(ImageSet set, int image_size) : set_(std::move(set)), S_(image_size) {
    if (S_ < set_.H || S_ < set_.W)
      throw std::invalid_argument("--image-size " + std::to_string(S_) +
                                  " is smaller than Fashion-MNIST's 28x28 images");
  }
  std::int64_t size() const override { return set_.n; }
  int channels() const override { return set_.C; }
  int imageSize() const override { return S_; }
  int classes() const override { return set_.classes; }

  std::int32_t fill(std::int64_t index, bool augment, std::uint64_t aug_seed,
                    float* out) const override {
    int dy = 0, dx = 0;
    bool flip = false;
    if (augment) {
      std::mt19937_64 rng(aug_seed);
      dy = static_cast<int>(rng() % (2 * kCropPad + 1)) - kCropPad;
      dx = static_cast<int>(rng() % (2 * kCropPad + 1)) - kCropPad;
      flip = (rng() & 1) != 0;
    }
    const int top = (S_ - set_.H) / 2 + dy, left = (S_ - set_.W) / 2 + dx;
    const std::uint8_t* src = set_.pixels.data() + index * set_.H * set_.W;
    const float black = -kFashionMean / kFashionStd;
    for (int y = 0; y < S_; ++y) {
      for (int x = 0; x < S_; ++x) {
        const int sy = y - top;
        const int sx = (flip ? S_ - 1 - x : x) - left;
        float v = black;
        if (sy >= 0 && sy < set_.H && sx >= 0 && sx < set_.W)
          v = (src[sy * set_.W + sx] / 255.0f - kFashionMean) / kFashionStd;
        out[y * S_ + x] = v;
      }
    }
    return set_.labels[index];
  }

 private:
  ImageSet set_;
  int S_;
};

class SyntheticSource : public ImageSource {
 public:
  static constexpr int kPool = 16;  // distinct images; enough to keep caches honest

  SyntheticSource(std::int64_t n, int C, int S, int classes, std::uint64_t seed)
      : n_(n), C_(C), S_(S), classes_(classes) {
    if (n < 1 || C < 1 || S < 1 || classes < 1)
      throw std::invalid_argument("synthetic data: sizes must be positive");
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    pool_.resize(static_cast<std::size_t>(kPool) * C * S * S);
    for (float& v : pool_) v = normal(rng);
  }
  std::int64_t size() const override { return n_; }
  int channels() const override { return C_; }
  int imageSize() const override { return S_; }
  int classes() const override { return classes_; }

  SyntheticPool pool() const { return {pool_.data(), kPool}; }

  std::int32_t fill(std::int64_t index, bool, std::uint64_t, float* out) const override {
    const std::size_t per = static_cast<std::size_t>(C_) * S_ * S_;
    std::copy_n(pool_.data() + (index % kPool) * per, per, out);
    return static_cast<std::int32_t>(index % classes_);
  }

 private:
  std::int64_t n_;
  int C_, S_, classes_;
  std::vector<float> pool_;
};

}  // namespace

std::unique_ptr<ImageSource> makeFashionMnist(const std::string& dir, bool train, int image_size,
                                              std::int64_t limit) {
  ImageSet set = loadFashionMnist(dir, train);
  if (limit > 0 && limit < set.n) {
    set.n = static_cast<int>(limit);
    set.pixels.resize(static_cast<std::size_t>(set.n) * set.H * set.W);
    set.labels.resize(set.n);
  }
  return std::make_unique<FashionMnistSource>(std::move(set), image_size);
}

std::unique_ptr<ImageSource> makeSynthetic(std::int64_t n, int channels, int image_size,
                                           int classes, std::uint64_t seed) {
  return std::make_unique<SyntheticSource>(n, channels, image_size, classes, seed);
}

std::optional<SyntheticPool> syntheticPool(const ImageSource& source) {
  if (const auto* synthetic = dynamic_cast<const SyntheticSource*>(&source))
    return synthetic->pool();
  return std::nullopt;
}

std::uint64_t mixSeed(std::uint64_t a, std::uint64_t b) {
  std::uint64_t z = a * 0x9E3779B97F4A7C15ull + b + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::int64_t stepsPerEpoch(std::int64_t n, int world, int batch) {
  const std::int64_t global = static_cast<std::int64_t>(world) * batch;
  if (global <= 0) throw std::invalid_argument("batch size and rank count must be positive");
  if (n < global)
    throw std::invalid_argument("the training set (" + std::to_string(n) +
                                " samples) is smaller than one global batch (" +
                                std::to_string(global) + ")");
  return n / global;
}

std::vector<std::int64_t> epochOrder(std::int64_t n, std::uint64_t seed, int epoch) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  // Fisher-Yates with our own generator: std::shuffle's algorithm is not specified, and
  // every rank (and every standard library) must produce the same order.
  std::mt19937_64 rng(mixSeed(seed, static_cast<std::uint64_t>(epoch)));
  for (std::int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(i + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

std::vector<std::int64_t> shardBatch(const std::vector<std::int64_t>& order, std::int64_t step,
                                     int rank, int world, int batch) {
  const std::int64_t begin = (step * world + rank) * static_cast<std::int64_t>(batch);
  if (begin + batch > static_cast<std::int64_t>(order.size()))
    throw std::out_of_range("step " + std::to_string(step) + " is past the end of the epoch");
  return {order.begin() + begin, order.begin() + begin + batch};
}

std::vector<std::int64_t> shardedEpochOrder(const std::vector<std::int64_t>& shard_sizes,
                                            std::uint64_t seed, int epoch, int rank, int world,
                                            std::int64_t window) {
  std::vector<std::int64_t> first(shard_sizes.size());
  std::int64_t n = 0;
  for (std::size_t s = 0; s < shard_sizes.size(); ++s) {
    first[s] = n;
    n += shard_sizes[s];
  }
  const std::uint64_t epoch_seed = mixSeed(seed, static_cast<std::uint64_t>(epoch));
  const std::vector<std::int64_t> shards =
      epochOrder(static_cast<std::int64_t>(shard_sizes.size()), epoch_seed, 0);
  const Range part = evalShard(n, rank, world);
  std::vector<std::int64_t> out;
  out.reserve(static_cast<std::size_t>(part.end - part.begin));
  std::int64_t pos = 0;  // position in the epoch's concatenation of shards
  for (std::int64_t s : shards) {
    const std::int64_t len = shard_sizes[static_cast<std::size_t>(s)];
    const std::int64_t lo = std::max(pos, part.begin), hi = std::min(pos + len, part.end);
    for (std::int64_t p = lo; p < hi; ++p)
      out.push_back(first[static_cast<std::size_t>(s)] + p - pos);
    pos += len;
  }
  if (window < 2) return out;
  // Windows are placed on positions of the whole epoch, not of this part, so the
  // shuffle of a record depends on the epoch alone and not on the rank count.
  std::mt19937_64 rng(mixSeed(epoch_seed, 0x5EED));
  const std::int64_t shift = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(window));
  std::int64_t begin = part.begin;
  while (begin < part.end) {
    const std::int64_t k = (begin + shift) / window;  // this window's number
    const std::int64_t end = std::min(part.end, (k + 1) * window - shift);
    std::mt19937_64 wrng(mixSeed(epoch_seed, static_cast<std::uint64_t>(k)));
    for (std::int64_t i = end - begin - 1; i > 0; --i) {
      const auto j = static_cast<std::int64_t>(wrng() % static_cast<std::uint64_t>(i + 1));
      std::swap(out[static_cast<std::size_t>(begin - part.begin + i)],
                out[static_cast<std::size_t>(begin - part.begin + j)]);
    }
    begin = end;
  }
  return out;
}

std::int64_t shardedStepsPerEpoch(std::int64_t n, int world, int batch) {
  if (world <= 0 || batch <= 0)
    throw std::invalid_argument("batch size and rank count must be positive");
  const std::int64_t steps = (n / world) / batch;
  if (steps < 1)
    throw std::invalid_argument("the training set (" + std::to_string(n) + " samples over " +
                                std::to_string(world) + " ranks) is smaller than one batch of " +
                                std::to_string(batch) + " per rank");
  return steps;
}

Range evalShard(std::int64_t n, int rank, int world) {
  return {n * rank / world, n * (rank + 1) / world};
}

}  // namespace accord::resnet
