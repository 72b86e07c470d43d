// The packed format when things go wrong: a pack that fails part way leaves the pack
// already in its folder readable and no temporary behind; files that are no JPEG are
// refused at pack time, all of them named; an index whose counts claim more than the
// file holds, an empty one, and a shard longer than its index says are refused with
// the file (and line) named, never with a huge allocation.
#include "error_of.h"
#include "jpeg.h"
#include "jpeg_source.h"
#include "records.h"
#include "scratch_dir.h"

#include <unistd.h>
#include <zlib.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <set>

using namespace accord::resnet;
namespace fs = std::filesystem;
using accord_test::errorOf;

namespace {

// Options by name: an aggregate list would need every field, and break as fields are added.
PackOptions packOptions(int shards, std::uint64_t seed) {
  PackOptions options;
  options.shards = shards;
  options.seed = seed;
  return options;
}

void spit(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// n small JPEGs over 2 classes; returns the folder, its packed copy's path beside it.
fs::path makeFolder(const std::string& name, int n) {
  const fs::path dir = accord_test::scratchDir("failures_" + name);
  for (int i = 0; i < n; ++i) {
    const fs::path cls = dir / (i % 2 ? "odd" : "even");
    fs::create_directories(cls);
    RgbImage img{16 + i, 12 + i, {}};
    img.pixels.assign(static_cast<std::size_t>(img.width) * img.height * 3,
                      static_cast<std::uint8_t>(20 * i));
    const auto bytes = encodeJpeg(img, 80);
    spit(cls / ("img" + std::to_string(i) + ".jpg"), std::string(bytes.begin(), bytes.end()));
  }
  return dir;
}

std::set<std::string> filesIn(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir))
    names.insert(entry.path().filename().string());
  return names;
}

// Every record of the pack in dir decodes, its CRC checked.
void checkReadable(const fs::path& dir) {
  auto packed = makePacked(dir.string(), 8);
  std::vector<float> out(3 * 8 * 8);
  for (std::int64_t i = 0; i < packed->size(); ++i)
    CHECK_NOTHROW(packed->fill(i, false, 0, out.data()));
}

}  // namespace

TEST_CASE("a failed re-pack leaves the pack already there readable", "[records]") {
  const fs::path src = makeFolder("repack", 9);
  const fs::path out = src.string() + "_packed";
  const RecordIndex before = packFolder(src.string(), out.string(), packOptions(3, 1));
  const std::string index_text = slurp(out / kIndexFile);
  const std::set<std::string> files = {"index.tsv", "shard-00000.rec", "shard-00001.rec",
                                       "shard-00002.rec"};
  REQUIRE(filesIn(out) == files);

  SECTION("an error while reading, after the first shard was written") {
    PackOptions opt = packOptions(3, 2);  // another seed: shard 0 would be written differently
    opt.progress = [](std::int64_t done, std::int64_t) {
      if (done == 5) throw DataError("made to fail");
    };
    CHECK(errorOf([&] { packFolder(src.string(), out.string(), opt); }) == "made to fail");
  }
  SECTION("a full disk under the second shard") {
    const fs::path tmp = out / ("shard-00001.rec.tmp." + std::to_string(::getpid()));
    fs::create_symlink("/dev/full", tmp);
    CHECK(errorOf([&] { packFolder(src.string(), out.string(), packOptions(3, 2)); }) ==
          tmp.string() + ": write failed: No space left on device");
  }
  CHECK(filesIn(out) == files);  // no temporary left
  CHECK(slurp(out / kIndexFile) == index_text);
  CHECK(readIndex(out.string()).records == before.records);
  checkReadable(out);
}

TEST_CASE("a re-pack into fewer shards removes the shards it no longer needs", "[records]") {
  const fs::path src = makeFolder("fewer", 6);
  const fs::path out = src.string() + "_packed";
  packFolder(src.string(), out.string(), packOptions(3, 1));
  packFolder(src.string(), out.string(), packOptions(2, 1));
  CHECK(filesIn(out) == std::set<std::string>{"index.tsv", "shard-00000.rec", "shard-00001.rec"});
  checkReadable(out);
}

TEST_CASE("files that are no JPEG are refused at pack time, all of them named", "[records]") {
  const fs::path src = makeFolder("notjpeg", 4);
  spit(src / "odd" / "photo.jpg", "\x89PNG\r\n\x1a\n and the rest of a PNG");
  spit(src / "even" / "cut.jpg", "\xff\xd8\xff");
  const fs::path out = src.string() + "_packed";
  const std::string e = errorOf([&] { packFolder(src.string(), out.string(), PackOptions{}); });
  CHECK(e.find(src.string() + ": 2 files are not a JPEG the trainer can decode") == 0);
  CHECK(e.find("\n  even/cut.jpg: ") != std::string::npos);
  CHECK(e.find("\n  odd/photo.jpg: Not a JPEG file: starts with 0x89 0x50") != std::string::npos);
  CHECK(filesIn(out).empty());
}

TEST_CASE("an index that claims more than it holds is refused by file and line", "[records]") {
  const fs::path src = makeFolder("counts", 4);
  const fs::path out = src.string() + "_packed";
  packFolder(src.string(), out.string(), packOptions(2, 1));
  const std::string text = slurp(out / kIndexFile);
  const auto refuse = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    t.replace(t.find(from), from.size(), to);
    spit(out / kIndexFile, t);
    return errorOf([&] { readIndex(out.string()); });
  };
  const std::string path = (out / kIndexFile).string();
  // Lines: version, classes 2 + 2 names, shards 2 + 2 shards, records 4 + 4 records.
  CHECK(refuse("records\t4", "records\t4294967295") ==
        path +
            " line 12: ends early, before record 5 of the 4294967295 announced "
            "(truncated index?)");
  // The section after the two names is read as more names.
  CHECK(refuse("classes\t2", "classes\t4294967295") == path + " line 5: has 2 fields, expected 1");
  spit(out / kIndexFile, "");
  CHECK(errorOf([&] { readIndex(out.string()); }) ==
        path + ": empty file, not an accord-records index");

  // Lines after the records announced, even an empty one: not what a pack writes.
  std::string last = text.substr(text.rfind('\n', text.size() - 2) + 1);  // the 4th record
  last.pop_back();                                                        // its newline
  CHECK(refuse("records\t4", "records\t3") ==
        path + " line 12: more after the 3 records announced (the index was changed after " +
            "packing?): '" + last.substr(0, 60) + "'");
  spit(out / kIndexFile, text + "garbage\n");
  CHECK(errorOf([&] { readIndex(out.string()); }) ==
        path + " line 13: more after the 4 records announced (the index was changed after " +
            "packing?): 'garbage'");
  spit(out / kIndexFile, text + "\n");
  CHECK(errorOf([&] { readIndex(out.string()); }).find(path + " line 13: more after the 4 ") == 0);
  spit(out / kIndexFile, text);
  CHECK_NOTHROW(readIndex(out.string()));

  // A record past the end its shard has in the index.
  const RecordIndex index = [&] {
    spit(out / kIndexFile, text);
    return readIndex(out.string());
  }();
  const std::string shard0 = "shard-00000.rec\t" + std::to_string(index.shard_bytes[0]);
  CHECK(refuse(shard0, "shard-00000.rec\t10").find(path + " line 9: record ends at byte ") == 0);

  // Bytes appended to a shard: the index was not written for this file.
  spit(out / kIndexFile, text);
  const fs::path shard = out / index.shards[1];
  std::ofstream(shard, std::ios::binary | std::ios::app) << "more";
  const std::string want = shard.string() + ": " + std::to_string(index.shard_bytes[1] + 4) +
                           " bytes, but index.tsv says " + std::to_string(index.shard_bytes[1]) +
                           ": not the shard this index was written with";
  CHECK(errorOf([&] { readIndex(out.string()); }) == want);
  CHECK(errorOf([&] { makePacked(out.string(), 8); }) == want);
}

TEST_CASE("an empty folder name is refused before anything is written", "[records]") {
  // "" is the current folder to the file system calls: the pack would land there.
  const fs::path src = makeFolder("emptyname", 2);
  const fs::path cwd = accord_test::scratchDir("emptyname_cwd");
  const fs::path before = fs::current_path();
  fs::current_path(cwd);
  CHECK(errorOf([&] { packFolder(src.string(), "", PackOptions{}); }) ==
        "the output folder's name is empty");
  CHECK(errorOf([&] { packFolder("", src.string() + "_packed", PackOptions{}); }) ==
        "the source folder's name is empty");
  fs::current_path(before);
  CHECK(filesIn(cwd).empty());
  CHECK_FALSE(fs::exists(src.string() + "_packed"));
}

TEST_CASE("a pack removes the temporaries a killed pack left there, and only those", "[records]") {
  const fs::path src = makeFolder("stale", 4);
  const fs::path out = src.string() + "_packed";
  fs::create_directories(out);
  // No process has a pid above 2^22, Linux's largest pid_max; pid 1 always runs.
  const std::string dead = "4194305";
  const std::set<std::string> stale = {"shard-00000.rec.tmp." + dead, "shard-00007.rec.tmp." + dead,
                                       "shard-123456.rec.tmp." + dead, "index.tsv.tmp." + dead};
  const std::set<std::string> others = {"shard-00000.rec.tmp.1",
                                        "shard-0.rec.tmp." + dead,
                                        "notes.tmp." + dead,
                                        "shard-00000.rec.tmp." + dead + ".x",
                                        "shard-00000.rec.tmp.",
                                        "index.tsv.tmp.x",
                                        "shard-00000.rec.tmp.99999999999",
                                        "Shard-00000.rec.tmp." + dead};
  for (const auto& set : {stale, others})
    for (const std::string& name : set) spit(out / name, "left");
  fs::create_directory(out / ("shard-00001.rec.tmp." + dead));  // not a file
  std::set<std::string> removed;
  PackOptions opt = packOptions(2, 1);
  opt.removed_stale = [&](const std::string& path) { removed.insert(path); };
  packFolder(src.string(), out.string(), opt);
  std::set<std::string> want_removed;
  for (const std::string& name : stale) want_removed.insert((out / name).string());
  CHECK(removed == want_removed);
  std::set<std::string> want = others;
  want.insert({"index.tsv", "shard-00000.rec", "shard-00001.rec", "shard-00001.rec.tmp." + dead});
  CHECK(filesIn(out) == want);
  checkReadable(out);
}

TEST_CASE("an output folder inside the source folder is refused", "[records]") {
  // The next pack of the source would take it for a class.
  const fs::path src = makeFolder("inside", 4);
  const fs::path link = src.string() + "_link";
  fs::create_directory_symlink(src, link);
  const auto refused = [&](const fs::path& in, const fs::path& out) {
    return errorOf([&] { packFolder(in.string(), out.string(), packOptions(1, 1)); });
  };
  CHECK(refused(src, src / "packed") == "the output folder " + (src / "packed").string() +
                                            " is inside the source folder " + src.string() +
                                            ": a later pack of " + src.string() +
                                            " would take it for a class; name a folder outside it");
  CHECK(refused(src, src / "odd" / ".." / "packed").find(" is inside the source folder ") !=
        std::string::npos);
  CHECK(refused(link, src / "packed").find(" is inside the source folder ") != std::string::npos);
  CHECK(refused(src, link / "packed").find(" is inside the source folder ") != std::string::npos);
  CHECK(refused(src, src.string() + "/") ==
        "the output folder " + src.string() + "/ is the source folder " + src.string() +
            ": the pack would lie among its class folders; name a folder outside it");
  CHECK(filesIn(src) == std::set<std::string>{"even", "odd"});
  // A sibling whose name starts with the source's is outside it.
  CHECK(refused(src, src.string() + "_packed").empty());
}

TEST_CASE("an empty class folder is a class in a pack as in the folder reader", "[records]") {
  // Both keep it, so that labels agree with a split that has images of it.
  const fs::path src = makeFolder("emptyclass", 4);
  fs::create_directory(src / "aardvark");
  const fs::path out = src.string() + "_packed";
  packFolder(src.string(), out.string(), packOptions(1, 1));
  CHECK(readIndex(out.string()).classes == std::vector<std::string>{"aardvark", "even", "odd"});
  CHECK(makeJpegFolder(src.string(), 8)->classNames() == readIndex(out.string()).classes);
  CHECK(makePacked(out.string(), 8)->classNames() == readIndex(out.string()).classes);
}
