// The packed format and the photo sources: pack -> read gives back the folder's bytes
// and labels; sharded epoch orders are disjoint per rank, read shards front to back
// and change every epoch; bad records are reported with file and offset and skipped
// (and counted) or rejected, the first in order whichever thread meets one first.
#include "jpeg.h"
#include "jpeg_source.h"
#include "loader.h"
#include "records.h"
#include "scratch_dir.h"

#include <zlib.h>
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

using namespace accord::resnet;
namespace fs = std::filesystem;

namespace {

// Options by name: an aggregate list would need every field, and break as fields are added.
PackOptions packOptions(int shards, std::uint64_t seed) {
  PackOptions options;
  options.shards = shards;
  options.seed = seed;
  return options;
}

std::vector<std::uint8_t> slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void spit(const fs::path& p, const std::vector<std::uint8_t>& bytes) {
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

// n JPEGs of varied sizes and colours over 3 classes (+ the files a scan must ignore).
fs::path makeFolder(const std::string& name, int n) {
  const fs::path dir = accord_test::scratchDir("records_" + name);
  const char* classes[] = {"cat", "dog", "eel"};
  for (int i = 0; i < n; ++i) {
    const fs::path cls = dir / classes[i % 3];
    fs::create_directories(cls);
    RgbImage img{40 + 7 * i, 30 + 5 * i, {}};
    for (int p = 0; p < img.width * img.height; ++p)
      for (int c = 0; c < 3; ++c)
        img.pixels.push_back(static_cast<std::uint8_t>((p * (c + 1) + i * 40) % 256));
    spit(cls / ("img" + std::to_string(i) + ".jpg"), encodeJpeg(img, 85));
  }
  fs::create_directories(dir / "empty-class");
  return dir;
}

std::string badRecordOf(const ImageSource& src, std::int64_t i) {
  std::vector<float> out(3 * 16 * 16);
  try {
    src.fill(i, false, 0, out.data());
  } catch (const BadRecord& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("pack then read gives the folder's bytes and labels back", "[records]") {
  const fs::path src = makeFolder("pack", 11);
  const fs::path out = src.string() + "_packed";
  fs::remove_all(out);
  PackOptions opt;
  opt.shards = 3;
  opt.seed = 9;
  std::int64_t last = 0;
  opt.progress = [&](std::int64_t done, std::int64_t total) {
    CHECK(done == last + 1);
    CHECK(total == 11);
    last = done;
  };
  const RecordIndex written = packFolder(src.string(), out.string(), opt);
  CHECK(last == 11);
  const RecordIndex index = readIndex(out.string());
  CHECK(index.records == written.records);
  CHECK(index.classes == std::vector<std::string>{"cat", "dog", "eel", "empty-class"});
  REQUIRE(index.shards.size() == 3);
  std::set<std::string> sources;
  std::vector<int> per_shard(3, 0);
  for (const RecordEntry& e : index.records) {
    const auto original = slurp(src / e.source);
    const auto shard = slurp(out / index.shards[e.shard]);
    REQUIRE(e.offset + e.length <= shard.size());
    CHECK(std::vector<std::uint8_t>(shard.begin() + e.offset,
                                    shard.begin() + e.offset + e.length) == original);
    CHECK(index.classes[e.label] == fs::path(e.source).parent_path().string());
    CHECK(e.crc == crc32_z(0, original.data(), original.size()));
    sources.insert(e.source);
    ++per_shard[e.shard];
  }
  CHECK(sources.size() == 11);
  CHECK(per_shard == std::vector<int>{3, 4, 4});
  // Shuffled when packed: not in the folder's (class, name) order.
  std::vector<std::string> packed_order;
  for (const RecordEntry& e : index.records) packed_order.push_back(e.source);
  CHECK_FALSE(std::is_sorted(packed_order.begin(), packed_order.end()));

  // The packed source decodes each record exactly as the folder source decodes its file.
  auto folder = makeJpegFolder(src.string(), 24);
  auto packed = makePacked(out.string(), 24);
  CHECK(packed->classNames() == folder->classNames());
  CHECK(packed->shardSizes() == std::vector<std::int64_t>{3, 4, 4});
  const ImageFolder scan = scanImageFolder(src.string());
  std::vector<float> a(3 * 24 * 24), b(3 * 24 * 24);
  for (std::size_t r = 0; r < index.records.size(); ++r) {
    const auto f = std::find(scan.files.begin(), scan.files.end(), index.records[r].source) -
                   scan.files.begin();
    for (bool augment : {false, true}) {
      CHECK(packed->fill(static_cast<std::int64_t>(r), augment, 77, a.data()) ==
            folder->fill(f, augment, 77, b.data()));
      CHECK(a == b);
    }
  }
}

TEST_CASE("a damaged index is refused naming the file and line", "[records]") {
  const fs::path src = makeFolder("badindex", 4);
  const fs::path out = src.string() + "_packed";
  fs::remove_all(out);
  packFolder(src.string(), out.string(), packOptions(2, 1));
  std::string text;
  {
    std::ifstream in(out / kIndexFile);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  const auto refuse = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    t.replace(t.find(from), from.size(), to);
    std::ofstream(out / kIndexFile) << t;
    try {
      readIndex(out.string());
    } catch (const DataError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(refuse("records\t4", "records\t5").find("line 14: ends early") != std::string::npos);
  CHECK(refuse("accord-records\t1", "accord-records\t2").find("index.tsv line 1") !=
        std::string::npos);
  // The first record's label (field 4) made 7: only 4 classes.
  const std::size_t rec = text.find("records\t4\n") + 10;
  const std::size_t label = text.find('\t', text.find('\t', text.find('\t', rec) + 1) + 1) + 1;
  CHECK(refuse(text.substr(rec, label - rec + 1), text.substr(rec, label - rec) + "7")
            .find("'7' is not a number in [0, 3]") != std::string::npos);
}

TEST_CASE("sharded epoch orders: own shards per rank, read in order, reshuffled", "[records]") {
  const std::vector<std::int64_t> sizes = {50, 70, 30, 90, 60};  // 300 records
  const std::int64_t n = 300;
  for (int world : {1, 2, 3, 4}) {
    for (int epoch : {0, 1}) {
      std::set<std::int64_t> all;
      std::size_t total = 0;
      for (int r = 0; r < world; ++r) {
        const auto order = shardedEpochOrder(sizes, 5, epoch, r, world, 16);
        CHECK(order == shardedEpochOrder(sizes, 5, epoch, r, world, 16));  // every rank agrees
        CHECK(static_cast<std::int64_t>(order.size()) >= n / world);
        CHECK(static_cast<std::int64_t>(order.size()) <= n / world + 1);
        all.insert(order.begin(), order.end());
        total += order.size();
        // Without the window shuffle, a rank reads runs of consecutive records: one
        // jump per shard boundary at most.
        const auto plain = shardedEpochOrder(sizes, 5, epoch, r, world, 1);
        CHECK(std::set<std::int64_t>(plain.begin(), plain.end()) ==
              std::set<std::int64_t>(order.begin(), order.end()));
        int jumps = 0;
        for (std::size_t i = 1; i < plain.size(); ++i) jumps += plain[i] != plain[i - 1] + 1;
        CHECK(jumps <= 4);
        // With it, a record moves less than a window.
        for (std::size_t i = 0; i < order.size(); ++i)
          CHECK(std::abs(static_cast<long>(std::find(plain.begin(), plain.end(), order[i]) -
                                           plain.begin()) -
                         static_cast<long>(i)) < 16);
      }
      CHECK(total == static_cast<std::size_t>(n));  // a partition of the set
      CHECK(all.size() == static_cast<std::size_t>(n));
    }
  }
  // A new epoch deals the shards out anew and shuffles differently.
  CHECK(shardedEpochOrder(sizes, 5, 0, 0, 2, 16) != shardedEpochOrder(sizes, 5, 1, 0, 2, 16));
  std::set<std::int64_t> firsts;
  for (int epoch = 0; epoch < 10; ++epoch)
    firsts.insert(shardedEpochOrder(sizes, 5, epoch, 0, 2, 1).front());
  CHECK(firsts.size() > 2);
  CHECK(shardedStepsPerEpoch(300, 4, 8) == 9);  // 75 a rank
  CHECK_THROWS(shardedStepsPerEpoch(30, 4, 8));
}

TEST_CASE("the loader reads a packed set rank by rank as the sharded order says", "[records]") {
  const fs::path src = makeFolder("loader", 24);
  const fs::path out = src.string() + "_packed";
  fs::remove_all(out);
  packFolder(src.string(), out.string(), packOptions(4, 3));
  auto packed = makePacked(out.string(), 16);
  const RecordIndex index = readIndex(out.string());
  std::set<std::string> seen;
  for (int rank = 0; rank < 2; ++rank) {
    LoaderOptions lo;
    lo.batch = 4;
    lo.rank = rank;
    lo.world = 2;
    lo.seed = 11;
    lo.workers = 2;
    Loader loader(*packed, lo);
    REQUIRE(loader.steps() == 3);
    loader.startEpoch(1);
    const auto order = shardedEpochOrder(packed->shardSizes(), 11, 1, rank, 2);
    std::vector<float> x(4 * 3 * 16 * 16);
    std::vector<std::int32_t> y(4);
    for (int s = 0; s < 3; ++s) {
      REQUIRE(loader.next(x.data(), y.data()) == 4);
      for (int i = 0; i < 4; ++i) {
        const RecordEntry& e = index.records[order[s * 4 + i]];
        CHECK(y[i] == e.label);
        CHECK(seen.insert(e.source).second);  // no record on both ranks
      }
    }
    CHECK(loader.next(x.data(), y.data()) == 0);
  }
  CHECK(seen.size() == 24);
}

TEST_CASE("bad records are reported with file and offset, then skipped or rejected", "[records]") {
  const fs::path src = makeFolder("corrupt", 12);
  const fs::path out = src.string() + "_packed";
  fs::remove_all(out);
  packFolder(src.string(), out.string(), packOptions(2, 4));
  RecordIndex index = readIndex(out.string());
  // One byte flipped in the middle of the first record of shard 0; the second made no
  // JPEG with its checksum right (accord-pack refuses such files, an older pack may not).
  const RecordEntry& flipped = index.records[0];
  const std::int64_t foreign = 1;
  RecordEntry& not_jpeg = index.records[foreign];
  const fs::path shard0 = out / index.shards[0];
  {
    auto bytes = slurp(shard0);
    bytes[flipped.offset + flipped.length / 2] ^= 0x5a;
    std::fill_n(bytes.begin() + not_jpeg.offset, not_jpeg.length, 'x');
    not_jpeg.crc = crc32_z(0, bytes.data() + not_jpeg.offset, not_jpeg.length);
    spit(shard0, bytes);
    writeIndex(out.string(), index);
  }
  // The folder source's own non-JPEG, added after packing.
  spit(src / "dog" / "zz-not-a-jpeg.jpg", {'n', 'o', 't', ' ', 'j', 'p', 'e', 'g'});
  // Shard 1 loses the last 10 bytes of its last record.
  const RecordEntry& cut = index.records.back();
  const fs::path shard1 = out / index.shards[1];
  fs::resize_file(shard1, cut.offset + cut.length - 10);

  auto packed = makePacked(out.string(), 16);
  std::string e = badRecordOf(*packed, 0);
  CHECK(e.find(shard0.string() + " (offset 0, " + std::to_string(flipped.length) + " bytes") !=
        std::string::npos);
  CHECK(e.find("corrupt: CRC-32") != std::string::npos);
  e = badRecordOf(*packed, packed->size() - 1);
  CHECK(e.find(shard1.string() + " (offset " + std::to_string(cut.offset) + ",") !=
        std::string::npos);
  CHECK(e.find("truncated: the shard holds " + std::to_string(cut.offset + cut.length - 10) +
               " bytes") != std::string::npos);
  e = badRecordOf(*packed, foreign);
  CHECK(e.find("offset " + std::to_string(index.records[foreign].offset)) != std::string::npos);
  CHECK(e.find("from " + not_jpeg.source +
               "): not a usable JPEG: Not a JPEG file: starts with 0x78") != std::string::npos);
  int bad = 0;
  for (std::int64_t i = 0; i < packed->size(); ++i) bad += !badRecordOf(*packed, i).empty();
  CHECK(bad == 3);

  // The folder source names the file.
  auto folder = makeJpegFolder(src.string(), 16);
  const ImageFolder scan = scanImageFolder(src.string());
  const auto f =
      std::find(scan.files.begin(), scan.files.end(), "dog/zz-not-a-jpeg.jpg") - scan.files.begin();
  CHECK(badRecordOf(*folder, f)
            .find((src / "dog/zz-not-a-jpeg.jpg").string() + " (offset 0, 8 bytes)") !=
        std::string::npos);

  // skip: every good record arrives once, the three bad ones are counted.
  LoaderOptions lo;
  lo.batch = 5;
  lo.train = false;
  lo.skip_bad = true;
  Loader skip(*packed, lo);
  skip.startEpoch(0);
  std::vector<float> x(5 * 3 * 16 * 16);
  std::vector<std::int32_t> y(5);
  int total = 0;
  for (int got; (got = skip.next(x.data(), y.data())) > 0;) total += got;
  CHECK(total == packed->size() - 3);
  CHECK(skip.skipped() == 3);
  // reject: the first bad batch fails the epoch with the record's file and offset.
  lo.skip_bad = false;
  Loader reject(*packed, lo);
  reject.startEpoch(0);
  std::string error;
  try {
    while (reject.next(x.data(), y.data()) > 0) {
    }
  } catch (const BadRecord& err) {
    error = err.what();
  }
  CHECK(error.find(shard0.string() + " (offset 0,") != std::string::npos);
  CHECK(reject.skipped() == 0);
}

namespace {

// 20 one-channel 2x2 samples whose pixels hold their index; the bad ones fail, each
// after a delay of its own, so the bad sample met first need not be the first in order.
class SlowBadSource : public ImageSource {
 public:
  explicit SlowBadSource(std::map<std::int64_t, int> fail_after_ms)
      : fail_after_ms_(std::move(fail_after_ms)) {}
  std::int64_t size() const override { return 20; }
  int channels() const override { return 1; }
  int imageSize() const override { return 2; }
  int classes() const override { return 2; }
  std::int32_t fill(std::int64_t index, bool, std::uint64_t, float* out) const override {
    if (const auto bad = fail_after_ms_.find(index); bad != fail_after_ms_.end()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(bad->second));
      throw BadRecord("sample " + std::to_string(index) + " is bad");
    }
    std::fill_n(out, 4, static_cast<float>(index));
    return static_cast<std::int32_t>(index % 2);
  }

 private:
  std::map<std::int64_t, int> fail_after_ms_;
};

}  // namespace

TEST_CASE("a rejected epoch names its first bad sample in order and after the batches before it",
          "[records]") {
  // Step 1 (samples 5-9) holds two bad samples, the first of them the slowest to fail;
  // step 2 one that fails at once. Several steps are filled at the same time.
  const SlowBadSource source({{6, 200}, {8, 0}, {12, 0}});
  LoaderOptions lo;
  lo.batch = 5;
  lo.train = false;
  lo.prefetch = 4;
  lo.workers = 4;
  std::vector<float> x(5 * 4);
  std::vector<std::int32_t> y(5);
  for (int epoch = 0; epoch < 3; ++epoch) {
    Loader loader(source, lo);
    loader.startEpoch(epoch);
    REQUIRE(loader.next(x.data(), y.data()) == 5);
    CHECK(x[4 * 4] == 4.0f);  // step 0, whole
    std::string error;
    try {
      loader.next(x.data(), y.data());
    } catch (const BadRecord& e) {
      error = e.what();
    }
    CHECK(error == "sample 6 is bad");
  }
  // Skipping: step 1 keeps its three good samples in order.
  lo.skip_bad = true;
  Loader loader(source, lo);
  loader.startEpoch(0);
  REQUIRE(loader.next(x.data(), y.data()) == 5);
  REQUIRE(loader.next(x.data(), y.data()) == 3);
  CHECK(std::vector<float>{x[0], x[4], x[8]} == std::vector<float>{5, 7, 9});
  CHECK(loader.next(x.data(), y.data()) == 4);
  CHECK(loader.next(x.data(), y.data()) == 5);
  CHECK(loader.next(x.data(), y.data()) == 0);
  CHECK(loader.skipped() == 3);
}
