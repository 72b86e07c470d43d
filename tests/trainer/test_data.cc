// Data: IDX parsing and its errors, the sharding rule (disjoint shards, equal step
// counts, 2 x B equals 1 x 2B), and the prefetching loader.
#include "data.h"
#include "error_of.h"
#include "jpeg_source.h"
#include "loader.h"
#include "scratch_dir.h"

#include <sys/resource.h>
#include <zlib.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace accord::resnet;
namespace fs = std::filesystem;
using accord_test::errorOf;

namespace {

fs::path tempDir(const std::string& name) { return accord_test::scratchDir("data_" + name); }

void writeGz(const fs::path& path, const std::vector<unsigned char>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
}

void writePlain(const fs::path& path, const std::vector<unsigned char>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

// The process's peak resident memory so far, in MiB.
long peakRssMiB() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024;
}

std::vector<unsigned char> idxBytes(const std::vector<std::uint32_t>& dims, std::size_t data_bytes,
                                    unsigned char fill = 1) {
  std::vector<unsigned char> b = {0, 0, 0x08, static_cast<unsigned char>(dims.size())};
  for (std::uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<unsigned char>(d >> s));
  b.insert(b.end(), data_bytes, fill);
  return b;
}

// A tiny Fashion-MNIST look-alike: n images of 28x28 and n labels.
fs::path writeTinyFashion(const std::string& name, int n, int labels_n, unsigned char label) {
  fs::path dir = tempDir(name);
  for (const char* split : {"train", "t10k"}) {
    writeGz(dir / (std::string(split) + "-images-idx3-ubyte.gz"),
            idxBytes({static_cast<std::uint32_t>(n), 28, 28}, std::size_t(n) * 784, 128));
    writeGz(dir / (std::string(split) + "-labels-idx1-ubyte.gz"),
            idxBytes({static_cast<std::uint32_t>(labels_n)}, labels_n, label));
  }
  return dir;
}

}  // namespace

TEST_CASE("IDX files parse and Fashion-MNIST loads", "[data]") {
  fs::path dir = writeTinyFashion("ok", 5, 5, 3);
  IdxArray a = readIdx((dir / "train-images-idx3-ubyte.gz").string());
  CHECK(a.dims == std::vector<std::uint32_t>{5, 28, 28});
  CHECK(a.data.size() == 5 * 784);
  ImageSet set = loadFashionMnist(dir.string(), true);
  CHECK(set.n == 5);
  CHECK(set.labels[4] == 3);
}

TEST_CASE("missing and corrupt dataset files are errors naming the file", "[data]") {
  fs::path dir = tempDir("bad");
  std::string e = errorOf([&] { loadFashionMnist(dir.string(), true); });
  CHECK(e == (dir / "train-images-idx3-ubyte.gz").string() +
                 ": no such file (install the Debian package dataset-fashion-mnist or pass "
                 "--data-dir)");
  // A tool that names the folder with another flag has it suggested instead.
  e = errorOf([&] { loadFashionMnist(dir.string(), false, "--fashion-dir"); });
  CHECK(e == (dir / "t10k-images-idx3-ubyte.gz").string() +
                 ": no such file (install the Debian package dataset-fashion-mnist or pass "
                 "--fashion-dir)");

  writeGz(dir / "magic.gz", {1, 2, 3, 4, 5, 6, 7, 8});
  e = errorOf([&] { readIdx((dir / "magic.gz").string()); });
  CHECK(e.find("magic.gz") != std::string::npos);
  CHECK(e.find("bad magic") != std::string::npos);

  auto trunc = idxBytes({10, 28, 28}, 784 * 3);  // promises 10 images, holds 3
  writeGz(dir / "trunc.gz", trunc);
  e = errorOf([&] { readIdx((dir / "trunc.gz").string()); });
  CHECK(e.find("truncated") != std::string::npos);

  // A gzip stream cut in the middle is corrupt, not silently short.
  auto good = idxBytes({2, 28, 28}, 784 * 2);
  writeGz(dir / "whole.gz", good);
  {
    std::string raw;
    std::ifstream in(dir / "whole.gz", std::ios::binary);
    raw.assign(std::istreambuf_iterator<char>(in), {});
    std::ofstream out(dir / "cut.gz", std::ios::binary);
    out.write(raw.data(), static_cast<std::streamsize>(raw.size() / 2));
  }
  e = errorOf([&] { readIdx((dir / "cut.gz").string()); });
  CHECK(e.find("cut.gz") != std::string::npos);

  fs::path mismatch = writeTinyFashion("mismatch", 5, 4, 1);
  e = errorOf([&] { loadFashionMnist(mismatch.string(), true); });
  CHECK(e.find("4 labels for 5 images") != std::string::npos);

  fs::path other = tempDir("14x14");  // another size would train on padded, mismatched images
  writeGz(other / "t10k-images-idx3-ubyte.gz", idxBytes({3, 14, 14}, 3 * 196));
  writeGz(other / "t10k-labels-idx1-ubyte.gz", idxBytes({3}, 3, 1));
  e = errorOf([&] { loadFashionMnist(other.string(), false); });
  CHECK(e.find("t10k-images-idx3-ubyte.gz") != std::string::npos);
  CHECK(e.find("images of 14x14; Fashion-MNIST's are 28x28") != std::string::npos);

  fs::path badlabel = writeTinyFashion("badlabel", 3, 3, 12);
  e = errorOf([&] { loadFashionMnist(badlabel.string(), false); });
  CHECK(e.find("label 12") != std::string::npos);
}

// The trainer's default run and its accuracy test read this copy, so a missing package
// is a broken test machine, not a reason to skip.
// A header may claim up to the reader's 1 GiB limit; the file must hold that much
// before the reader spends that much memory.
TEST_CASE("an IDX header claiming more than the file holds is refused cheaply", "[data]") {
  fs::path dir = tempDir("liar");
  // Each declares more than the one before (784 MB, then 1019 MB) and holds 784 bytes,
  // so the peak-memory check sees each one's allocation, were there one.
  writeGz(dir / "liar.gz", idxBytes({1000000, 28, 28}, 784));
  writePlain(dir / "liar.idx", idxBytes({1300000, 28, 28}, 784));
  for (auto [name, declared] : {std::pair{"liar.gz", "1000000 x 28 x 28 = 784000000 bytes"},
                                std::pair{"liar.idx", "1300000 x 28 x 28 = 1019200000 bytes"}}) {
    INFO(name);
    const long before = peakRssMiB();
    const std::string e = errorOf([&] { readIdx((dir / name).string()); });
    CHECK(peakRssMiB() - before < 64);
    CHECK(e.find(name) != std::string::npos);
    CHECK(e.find(declared) != std::string::npos);
    CHECK(e.find("holds 784 bytes") != std::string::npos);
  }
  writePlain(dir / "long.idx", idxBytes({2, 28, 28}, 3 * 784));
  const std::string e = errorOf([&] { readIdx((dir / "long.idx").string()); });
  CHECK(e.find("2 x 28 x 28 = 1568 bytes, the file holds 2352") != std::string::npos);
}

TEST_CASE("IDX header sizes that overflow or exceed the limit are refused", "[data]") {
  fs::path dir = tempDir("huge");
  // 2^34 bytes: 16 GiB per rank if it were believed.
  writeGz(dir / "huge.gz", idxBytes({65536, 65536, 4}, 16));
  std::string e = errorOf([&] { readIdx((dir / "huge.gz").string()); });
  CHECK(e.find("huge.gz") != std::string::npos);
  CHECK(e.find("65536 x 65536 x 4 = 17179869184 bytes, more than the 1073741824") !=
        std::string::npos);
  // The product of four 2^32 - 1 sizes does not fit in 64 bits.
  const std::uint32_t big = 0xffffffffu;
  writeGz(dir / "overflow.gz", idxBytes({big, big, big, big}, 16));
  e = errorOf([&] { readIdx((dir / "overflow.gz").string()); });
  CHECK(e.find("4294967295 x 4294967295 x 4294967295 x 4294967295 overflow") != std::string::npos);
  writeGz(dir / "empty.gz", idxBytes({0, 28, 28}, 0));
  CHECK(errorOf([&] { readIdx((dir / "empty.gz").string()); }).find("0 x 28 x 28") !=
        std::string::npos);
}

TEST_CASE("the installed Fashion-MNIST has 60000 + 10000 images", "[data][fashion]") {
  for (const char* file : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                           "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"}) {
    const fs::path path = fs::path(kFashionMnistDir) / file;
    INFO(path.string() << " is missing: install the Debian package dataset-fashion-mnist");
    REQUIRE(fs::exists(path));
  }
  ImageSet train = loadFashionMnist(kFashionMnistDir, true);
  CHECK(train.n == 60000);
  ImageSet test = loadFashionMnist(kFashionMnistDir, false);
  CHECK(test.n == 10000);
  CHECK(test.H == 28);
  CHECK(test.W == 28);
}

TEST_CASE("shards are disjoint, steps are equal, and 2 x B equals 1 x 2B", "[data]") {
  const std::int64_t n = 1003;  // not a multiple of anything useful
  const int B = 8;
  for (int world : {1, 2, 3, 4}) {
    const std::int64_t steps = stepsPerEpoch(n, world, B);
    CHECK(steps == n / (world * B));
    auto order = epochOrder(n, 7, 3);
    std::set<std::int64_t> seen;
    std::size_t total = 0;
    for (int r = 0; r < world; ++r)
      for (std::int64_t s = 0; s < steps; ++s)
        for (std::int64_t i : shardBatch(order, s, r, world, B)) {
          seen.insert(i);
          ++total;
        }
    CHECK(seen.size() == total);  // disjoint
    CHECK(total == static_cast<std::size_t>(steps * world * B));
  }
  auto order = epochOrder(n, 7, 0);
  for (std::int64_t s = 0; s < stepsPerEpoch(n, 2, B); ++s) {
    auto a = shardBatch(order, s, 0, 2, B), b = shardBatch(order, s, 1, 2, B);
    a.insert(a.end(), b.begin(), b.end());
    CHECK(a == shardBatch(order, s, 0, 1, 2 * B));
  }
  CHECK(epochOrder(n, 7, 0) == epochOrder(n, 7, 0));  // same on every rank
  CHECK(epochOrder(n, 7, 0) != epochOrder(n, 7, 1));  // reshuffled every epoch
  CHECK_THROWS(stepsPerEpoch(10, 2, 8));
}

TEST_CASE("evaluation shards cover every sample once", "[data]") {
  for (int world : {1, 2, 3, 7}) {
    std::int64_t covered = 0, expect_begin = 0;
    for (int r = 0; r < world; ++r) {
      Range range = evalShard(10000, r, world);
      CHECK(range.begin == expect_begin);
      covered += range.end - range.begin;
      expect_begin = range.end;
    }
    CHECK(covered == 10000);
  }
}

TEST_CASE("the loader delivers the shard's batches in order, prefetched", "[data]") {
  auto src = makeSynthetic(100, 1, 8, 10, 1);
  LoaderOptions opt;
  opt.batch = 6;
  opt.rank = 1;
  opt.world = 2;
  opt.seed = 5;
  opt.prefetch = 3;
  Loader loader(*src, opt);
  CHECK(loader.steps() == 8);
  std::vector<float> x(6 * 64);
  std::vector<std::int32_t> y(6);
  auto order = epochOrder(100, 5, 2);
  loader.startEpoch(2, 3);  // resume at step 3
  for (std::int64_t s = 3; s < 8; ++s) {
    REQUIRE(loader.next(x.data(), y.data()) == 6);
    auto idx = shardBatch(order, s, 1, 2, 6);
    for (int i = 0; i < 6; ++i) CHECK(y[i] == idx[i] % 10);
  }
  CHECK(loader.next(x.data(), y.data()) == 0);

  opt.train = false;
  Loader eval(*src, opt);
  CHECK(eval.steps() == 9);  // 50 samples in batches of 6
  eval.startEpoch(0);
  int total = 0, got;
  while ((got = eval.next(x.data(), y.data())) > 0) total += got;
  CHECK(total == 50);
}

TEST_CASE("borrow hands out the batches next copies, each intact until the next call", "[data]") {
  // Small synthetic images without augmentation: the same order and pixels through
  // borrow() as through next(), and a lent buffer is not refilled while the producer,
  // two batches ahead, works on the others.
  auto src = makeSynthetic(200, 1, 8, 10, 3);
  const LoaderOptions opt{.batch = 8, .seed = 9, .augment = false, .prefetch = 2};
  Loader copying(*src, opt), lending(*src, opt);
  copying.startEpoch(1);
  lending.startEpoch(1);
  std::vector<float> x(8 * 64);
  std::vector<std::int32_t> y(8), z(8);
  float* lent = nullptr;
  std::vector<float*> seen;
  for (std::int64_t s = 0; s < copying.steps(); ++s) {
    REQUIRE(copying.next(x.data(), y.data()) == 8);
    REQUIRE(lending.borrow(&lent, z.data()) == 8);
    CHECK(y == z);
    const std::vector<float> snapshot(lent, lent + x.size());
    CHECK(snapshot == x);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the producer runs ahead
    CHECK(std::equal(snapshot.begin(), snapshot.end(), lent));
    seen.push_back(lent);
  }
  CHECK(lending.borrow(&lent, z.data()) == 0);
  // Three buffers in turn: the lent one, and the two being filled meanwhile.
  std::sort(seen.begin(), seen.end());
  seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
  CHECK(seen.size() == 3);
  int buffers = 0;
  lending.forEachBuffer([&](float* p, std::size_t n) {
    ++buffers;
    CHECK(n == x.size());
    CHECK(std::find(seen.begin(), seen.end(), p) != seen.end());
  });
  CHECK(buffers == 3);
}

namespace {

// A synthetic source whose samples 3, 10, 17, ... cannot be used.
class GappySource : public ImageSource {
 public:
  explicit GappySource(const ImageSource& inner) : inner_(inner) {}
  std::int64_t size() const override { return inner_.size(); }
  int channels() const override { return inner_.channels(); }
  int imageSize() const override { return inner_.imageSize(); }
  int classes() const override { return inner_.classes(); }
  std::int32_t fill(std::int64_t index, bool augment, std::uint64_t seed,
                    float* out) const override {
    if (index % 7 == 3) throw BadRecord("sample " + std::to_string(index) + " is damaged");
    return inner_.fill(index, augment, seed, out);
  }

 private:
  const ImageSource& inner_;
};

}  // namespace

TEST_CASE("borrow names each sample's index; the synthetic pool rebuilds the batch", "[data]") {
  // What the GPU trainer builds a synthetic batch from (useDevicePool): image
  // index % pool.images of the pool, the label index % classes; the indices stay with
  // their samples when bad ones are dropped.
  auto src = makeSynthetic(300, 2, 4, 10, 11);
  const auto pool = syntheticPool(*src);
  REQUIRE(pool);
  REQUIRE(pool->images == 16);
  CHECK_FALSE(syntheticPool(GappySource(*src)));
  const std::size_t per = 2 * 4 * 4;
  for (bool gaps : {false, true}) {
    GappySource gappy(*src);
    const ImageSource& source = gaps ? static_cast<const ImageSource&>(gappy) : *src;
    const LoaderOptions opt{.batch = 12,
                            .rank = 1,
                            .world = 2,
                            .seed = 4,
                            .augment = false,
                            .prefetch = 2,
                            .skip_bad = true};
    Loader loader(source, opt);
    loader.startEpoch(0);
    const auto order = epochOrder(300, 4, 0);
    float* x = nullptr;
    std::vector<std::int32_t> y(12);
    std::vector<std::int64_t> idx(12, -1);
    std::int64_t dropped = 0;
    for (std::int64_t s = 0; s < loader.steps(); ++s) {
      const int n = loader.borrow(&x, y.data(), idx.data());
      std::vector<std::int64_t> expected;
      for (std::int64_t i : shardBatch(order, s, 1, 2, 12))
        if (!gaps || i % 7 != 3) expected.push_back(i);
      REQUIRE(n == static_cast<int>(expected.size()));
      dropped += 12 - n;
      for (int i = 0; i < n; ++i) {
        CHECK(idx[i] == expected[i]);
        CHECK(y[i] == idx[i] % 10);
        const float* image = pool->pixels + (idx[i] % pool->images) * per;
        CHECK(std::equal(image, image + per, x + i * per));
      }
    }
    CHECK((dropped > 0) == gaps);
  }
}

TEST_CASE("watched buffers: filled before they are lent, refilled only once given back", "[data]") {
  // What the GPU's copies ahead rely on (upload_ahead.h): the hooks see every batch
  // whole, and never a buffer the training loop holds.
  auto src = makeSynthetic(120, 1, 4, 10, 2);
  Loader loader(*src, LoaderOptions{.batch = 8, .seed = 3, .augment = false, .prefetch = 2});
  std::mutex mu;
  std::set<const float*> ready;  // filled, not yet refilled
  const float* lent = nullptr;
  int fills = 0, refilled_while_lent = 0;
  loader.watchBuffers(
      [&](const float* x) {
        std::lock_guard<std::mutex> lock(mu);
        refilled_while_lent += x == lent;
        ready.erase(x);
      },
      [&](const float* x, int n) {
        std::lock_guard<std::mutex> lock(mu);
        CHECK(n == 8);
        ready.insert(x);
        ++fills;
      });
  loader.startEpoch(0);
  float* x = nullptr;
  std::vector<std::int32_t> y(8);
  for (std::int64_t s = 0; s < loader.steps(); ++s) {
    {
      std::lock_guard<std::mutex> lock(mu);
      lent = nullptr;  // borrow() gives the last one back
    }
    REQUIRE(loader.borrow(&x, y.data()) == 8);
    {
      std::lock_guard<std::mutex> lock(mu);
      CHECK(ready.count(x) == 1);  // its filled() came first
      lent = x;
    }
    if (s % 3 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // let it run
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::lock_guard<std::mutex> lock(mu);
  CHECK(fills == loader.steps());
  CHECK(refilled_while_lent == 0);
}

TEST_CASE("with epochs, the producer goes on into the next epoch, whose batches stay the same",
          "[data]") {
  // The trainer's loader (LoaderOptions::epochs): while an epoch's last batches are used
  // the next epoch's first ones are made, and startEpoch(e + 1) hands those out. The
  // batches (augmented, so the epoch's seed counts) must be those of a fresh start, and
  // a start anywhere else (the same epoch again, a resumed step, past the last epoch)
  // must not take the batches made ahead.
  auto src = makeSynthetic(100, 1, 8, 10, 4);
  const LoaderOptions fresh_options{.batch = 6, .rank = 1, .world = 2, .seed = 7, .prefetch = 3};
  LoaderOptions going_on_options = fresh_options;
  going_on_options.epochs = 3;
  Loader fresh(*src, fresh_options), going_on(*src, going_on_options);
  REQUIRE(going_on.steps() == 8);
  std::mutex mu;
  int fills = 0;
  going_on.watchBuffers(nullptr, [&](const float*, int) {
    std::lock_guard<std::mutex> lock(mu);
    ++fills;
  });
  const auto fillsReach = [&](int wanted) {  // waits up to 5 s, then says how many
    for (int i = 0; i < 500; ++i) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (fills >= wanted) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // and no more than that
    std::lock_guard<std::mutex> lock(mu);
    return fills;
  };
  std::vector<float> x(6 * 64), z(6 * 64);
  std::vector<std::int32_t> y(6), w(6);
  const auto sameEpoch = [&](int epoch, std::int64_t first_step) {
    fresh.startEpoch(epoch, first_step);
    going_on.startEpoch(epoch, first_step);
    for (std::int64_t s = first_step; s < 8; ++s) {
      REQUIRE(fresh.next(x.data(), y.data()) == 6);
      REQUIRE(going_on.next(z.data(), w.data()) == 6);
      CHECK(y == w);
      CHECK(x == z);
    }
    CHECK(fresh.next(x.data(), y.data()) == 0);
    CHECK(going_on.next(z.data(), w.data()) == 0);
  };
  int made = 0;
  for (int epoch = 0; epoch < 3; ++epoch) {
    sameEpoch(epoch, 0);
    made += 8;
    // Every buffer is free after next(): the producer fills all four with the next
    // epoch's first batches, but none after the last epoch.
    const int ahead = epoch < 2 ? 4 : 0;
    CHECK(fillsReach(made + ahead) == made + ahead);
  }
  sameEpoch(3, 0);  // past the run's epochs: a fresh start
  made += 8;
  CHECK(fillsReach(made) == made);
  // Made ahead, then not taken: epoch 0 once more, then epoch 1 from its third step.
  sameEpoch(0, 0);
  CHECK(fillsReach(made + 8 + 4) == made + 8 + 4);
  sameEpoch(0, 0);
  sameEpoch(1, 2);
}

TEST_CASE("bad samples count in the epoch whose batches dropped them, not in the one made ahead",
          "[data]") {
  auto src = makeSynthetic(140, 1, 4, 10, 6);
  GappySource gappy(*src);
  const LoaderOptions opt{.batch = 10, .seed = 2, .augment = false, .prefetch = 2,
                          .skip_bad = true, .epochs = 2};
  Loader loader(gappy, opt);
  std::vector<float> x(10 * 16);
  std::vector<std::int32_t> y(10);
  std::int64_t dropped = 0;
  loader.startEpoch(0);
  for (int n; (n = loader.next(x.data(), y.data())) > 0;) dropped += 10 - n;
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // epoch 1's batches made
  CHECK(dropped == 20);  // 140 samples, every seventh bad
  CHECK(loader.skipped() == dropped);
  loader.startEpoch(1);
  for (int n; (n = loader.next(x.data(), y.data())) > 0;) dropped += 10 - n;
  CHECK(dropped == 40);
  CHECK(loader.skipped() == dropped);
}
