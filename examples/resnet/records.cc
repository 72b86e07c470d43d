// Packing folders into shards and reading the index; see records.h.
#include "records.h"

#include "data.h"
#include "idx.h"
#include "jpeg.h"
#include "unlink_on_signal.h"

#include <signal.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <regex>
#include <sstream>
#include <stdexcept>

namespace accord::resnet {
namespace {

namespace fs = std::filesystem;

bool isJpegName(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return ext == ".jpg" || ext == ".jpeg";
}

std::vector<std::uint8_t> readFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(path.string() + ": cannot open: " + std::strerror(errno));
  return {std::istreambuf_iterator<char>(in), {}};
}

std::string shardName(int s) {
  char name[32];
  std::snprintf(name, sizeof(name), "shard-%05d.rec", s);
  return name;
}

// Every file the trainer could not decode, so that one pass finds them all; the first
// few named, since a folder of wrong files needs no list of thousands.
std::string listBad(const std::string& src, std::vector<std::string> bad) {
  std::sort(bad.begin(), bad.end());
  constexpr std::size_t kNamed = 10;
  std::string text = src + ": " + std::to_string(bad.size()) +
                     (bad.size() == 1 ? " file is" : " files are") +
                     " not a JPEG the trainer can decode (remove or convert them, or leave "
                     "them out with --corrupt skip); nothing was packed:";
  for (std::size_t i = 0; i < std::min(bad.size(), kNamed); ++i) text += "\n  " + bad[i];
  if (bad.size() > kNamed) text += "\n  and " + std::to_string(bad.size() - kNamed) + " more";
  return text;
}

// One line of the index, split on tabs, with its number for messages.
class IndexReader {
 public:
  explicit IndexReader(const std::string& path) : path_(path), in_(path) {
    if (!in_) throw DataError(path + ": cannot open: " + std::strerror(errno));
  }
  // what: the line expected, for the message if the file ends before it.
  std::vector<std::string> next(std::size_t fields, const std::string& what = "") {
    std::string line;
    if (!std::getline(in_, line)) {
      if (line_ == 0) throw DataError(path_ + ": empty file, not an accord-records index");
      fail("ends early" + (what.empty() ? "" : ", before " + what) + " (truncated index?)");
    }
    ++line_;
    std::vector<std::string> out;
    std::size_t start = 0;
    for (std::size_t tab; (tab = line.find('\t', start)) != std::string::npos; start = tab + 1)
      out.push_back(line.substr(start, tab - start));
    out.push_back(line.substr(start));
    if (out.size() != fields)
      fail("has " + std::to_string(out.size()) + " fields, expected " + std::to_string(fields));
    return out;
  }
  // After the last record: anything more is not what a pack writes (lines appended, or
  // an index of another pack pasted in), and the records' count cannot be trusted.
  void expectEnd(std::uint64_t records) {
    std::string line;
    if (!std::getline(in_, line)) return;
    ++line_;
    fail("more after the " + std::to_string(records) +
         " records announced (the index was changed after packing?): '" + line.substr(0, 60) + "'");
  }
  // The count after a section keyword: "classes\t10".
  std::uint64_t section(const std::string& keyword, std::uint64_t limit) {
    auto f = next(2);
    if (f[0] != keyword) fail("'" + f[0] + "' where '" + keyword + "' was expected");
    return number(f[1], limit);
  }
  std::uint64_t number(const std::string& s, std::uint64_t limit, int base = 10) {
    errno = 0;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(s.c_str(), &end, base);
    if (s.empty() || *end != '\0' || errno != 0 || s[0] == '-' || v > limit)
      fail("'" + s + "' is not a number in [0, " + std::to_string(limit) + "]");
    return v;
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw DataError(path_ + " line " + std::to_string(line_) + ": " + what);
  }

 private:
  std::string path_;
  std::ifstream in_;
  std::int64_t line_ = 0;
};

constexpr std::uint64_t kMaxCount = 1ull << 32;  // classes, shards or records

// "record 78 of the 20000000 announced": the line the index ended before.
std::string nth(const std::string& what, std::uint64_t i, std::uint64_t count) {
  return what + " " + std::to_string(i + 1) + " of the " + std::to_string(count) + " announced";
}

// A shard longer than the index says is not the file the index was written with
// (bytes appended, or a shard of another pack), so no offset in it can be trusted. A
// shorter one is a cut copy: the records before the cut are still whole, and each
// record past it is reported when read, where the trainer can skip it.
void checkShardSizes(const std::string& dir, const RecordIndex& index) {
  for (std::size_t s = 0; s < index.shards.size(); ++s) {
    const fs::path path = fs::path(dir) / index.shards[s];
    std::error_code ec;
    const std::uint64_t size = fs::file_size(path, ec);
    if (!ec && size > index.shard_bytes[s])
      throw DataError(path.string() + ": " + std::to_string(size) + " bytes, but " + kIndexFile +
                      " says " + std::to_string(index.shard_bytes[s]) +
                      ": not the shard this index was written with");
  }
}

// A pack replaces the one already in its folder only once it is whole: each file is
// written under a temporary name beside its own and renamed into place at the end,
// the index last, so that a pack failing part way (a full disk, an unreadable image)
// leaves the previous pack readable and no temporary behind.
class PendingFiles {
 public:
  // names: every file to write, in the order create() is called for them.
  PendingFiles(fs::path dir, std::vector<std::string> names)
      : dir_(std::move(dir)), names_(std::move(names)), on_signal_(temps(dir_, names_)) {}
  PendingFiles(const PendingFiles&) = delete;
  PendingFiles& operator=(const PendingFiles&) = delete;
  ~PendingFiles() {
    std::error_code ignored;  // unwinding from the error worth reporting
    for (std::size_t i = 0; i < created_; ++i) fs::remove(temp(names_[i]), ignored);
  }
  std::ofstream create(const std::string& name) {
    if (created_ == names_.size() || names_[created_] != name)
      throw std::logic_error("PendingFiles: " + name + " was not announced next");
    // Counted before it exists: a signal while it is opened removes it too.
    on_signal_.exist(++created_);
    const fs::path path = temp(name);
    std::ofstream out(path, std::ios::binary);
    if (!out) throw DataError(path.string() + ": cannot create: " + std::strerror(errno));
    return out;
  }
  fs::path temp(const std::string& name) const { return tempOf(dir_, name); }
  void commit() {
    for (std::size_t i = 0; i < created_; ++i) {
      std::error_code ec;
      fs::rename(temp(names_[i]), dir_ / names_[i], ec);
      if (ec)
        throw DataError("cannot rename " + temp(names_[i]).string() + " to " + names_[i] + ": " +
                        ec.message());
    }
    created_ = 0;
    on_signal_.exist(0);
  }

 private:
  fs::path dir_;
  std::vector<std::string> names_;  // in the order to create and rename them
  std::size_t created_ = 0;         // names_[0, created_) have temporaries
  UnlinkOnSignal on_signal_;        // removes those on SIGINT, SIGTERM, SIGHUP

  static fs::path tempOf(const fs::path& dir, const std::string& name) {
    return dir / (name + ".tmp." + std::to_string(::getpid()));
  }
  static std::vector<std::string> temps(const fs::path& dir,
                                        const std::vector<std::string>& names) {
    std::vector<std::string> out;
    for (const std::string& name : names) out.push_back(tempOf(dir, name).string());
    return out;
  }
};

// Temporaries of a pack that died where no handler runs (SIGKILL, the OOM killer, a
// power cut) stay in its folder, and the next pack there removes them: names as
// PendingFiles makes them for a pack, "shard-<5 or more digits>.rec.tmp.<pid>" and
// "index.tsv.tmp.<pid>", and only where no process <pid> runs, so that a pack writing
// into the same folder at this moment keeps its own.
void removeStaleTemporaries(const fs::path& dir,
                            const std::function<void(const std::string&)>& removed) {
  static const std::regex pattern(R"((shard-[0-9]{5,}\.rec|index\.tsv)\.tmp\.([0-9]{1,10}))");
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    std::smatch m;
    if (!std::regex_match(name, m, pattern) || !entry.is_regular_file(ec)) continue;
    const long long pid = std::stoll(m[2].str());
    if (pid <= 0 || pid > INT_MAX || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // it runs
    if (fs::remove(entry.path(), ec) && removed) removed(entry.path().string());
  }
}

void writeBytes(std::ofstream& out, const void* data, std::size_t size, const fs::path& path) {
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) throw DataError(path.string() + ": write failed: " + std::strerror(errno));
}

void finish(std::ofstream& out, const fs::path& path) {
  out.close();
  if (!out) throw DataError(path.string() + ": write failed: " + std::strerror(errno));
}

void writeIndexTo(std::ofstream& out, const fs::path& path, const RecordIndex& index) {
  std::ostringstream text;
  text << "accord-records\t1\nclasses\t" << index.classes.size() << "\n";
  for (const std::string& c : index.classes) text << c << "\n";
  text << "shards\t" << index.shards.size() << "\n";
  for (std::size_t i = 0; i < index.shards.size(); ++i)
    text << index.shards[i] << "\t" << index.shard_bytes[i] << "\n";
  text << "records\t" << index.records.size() << "\n";
  char crc[16];
  for (const RecordEntry& e : index.records) {
    std::snprintf(crc, sizeof(crc), "%08x", e.crc);
    text << e.shard << "\t" << e.offset << "\t" << e.length << "\t" << e.label << "\t" << crc
         << "\t" << e.source << "\n";
  }
  const std::string bytes = text.str();
  writeBytes(out, bytes.data(), bytes.size(), path);
  finish(out, path);
}

// Why bytes are no JPEG the trainer can decode ("" if they are): the header and the
// first rows of one column of blocks at 1/8 scale, little next to reading the file.
// That finds files that are no JPEG at all (a PNG named .jpg) or have a broken
// header; damage further in is left to the record's CRC and the trainer.
std::string jpegProblem(const std::vector<std::uint8_t>& bytes) {
  try {
    decodeJpeg(bytes.data(), bytes.size(), [](int, int) {
      return DecodePlan{8, CropBox{0, 0, 1, 1}};
    });
  } catch (const JpegError& e) {
    return e.what();
  }
  return "";
}

// A pack written inside its source folder would be taken for a class by the next pack
// of that folder (and by the trainer reading it as a folder).
void checkOutsideSource(const std::string& src, const std::string& out_dir) {
  const auto resolved = [](const std::string& p) {
    std::error_code ec;
    fs::path r = fs::weakly_canonical(p, ec);  // symlinks of the part that exists
    if (ec) r = fs::absolute(p);
    r = r.lexically_normal();
    return r.has_filename() ? r : r.parent_path();  // "a/b/" is "a/b"
  };
  const fs::path s = resolved(src), o = resolved(out_dir);
  if (std::mismatch(s.begin(), s.end(), o.begin(), o.end()).first != s.end()) return;
  if (s == o)
    throw DataError("the output folder " + out_dir + " is the source folder " + src +
                    ": the pack would lie among its class folders; name a folder outside it");
  throw DataError("the output folder " + out_dir + " is inside the source folder " + src +
                  ": a later pack of " + src +
                  " would take it for a class; name a folder "
                  "outside it");
}

}  // namespace

RecordIndex readIndex(const std::string& dir) {
  IndexReader r((fs::path(dir) / kIndexFile).string());
  RecordIndex index;
  if (auto f = r.next(2); f[0] != "accord-records" || f[1] != "1")
    r.fail("not an accord-records version 1 index");
  // The counts are not trusted to size anything: the vectors grow as lines are read,
  // so a header claiming more than the file holds costs no more than the file.
  const std::uint64_t classes = r.section("classes", kMaxCount);
  for (std::uint64_t i = 0; i < classes; ++i)
    index.classes.push_back(r.next(1, nth("class", i, classes))[0]);
  const std::uint64_t shards = r.section("shards", kMaxCount);
  for (std::uint64_t i = 0; i < shards; ++i) {
    auto f = r.next(2, nth("shard", i, shards));
    if (f[0].empty() || f[0].find('/') != std::string::npos)
      r.fail("bad shard name '" + f[0] + "'");
    index.shards.push_back(f[0]);
    index.shard_bytes.push_back(r.number(f[1], UINT64_MAX));
  }
  const std::uint64_t records = r.section("records", kMaxCount);
  std::uint64_t end_of_last = 0;
  int last_shard = 0;
  for (std::uint64_t i = 0; i < records; ++i) {
    auto f = r.next(6, nth("record", i, records));
    RecordEntry& e = index.records.emplace_back();
    e.shard = static_cast<int>(r.number(f[0], shards == 0 ? 0 : shards - 1));
    e.offset = r.number(f[1], UINT64_MAX);
    e.length = r.number(f[2], UINT64_MAX - e.offset);
    e.label = static_cast<std::int32_t>(r.number(f[3], index.classes.size() - 1));
    e.crc = static_cast<std::uint32_t>(r.number(f[4], UINT32_MAX, 16));
    e.source = f[5];
    if (shards == 0 || index.classes.empty()) r.fail("a record, but no shards or classes");
    if (e.shard < last_shard || (e.shard == last_shard && e.offset < end_of_last))
      r.fail("records out of file order (shard " + f[0] + ", offset " + f[1] + ")");
    if (e.offset + e.length > index.shard_bytes[e.shard])
      r.fail("record ends at byte " + std::to_string(e.offset + e.length) + ", past the " +
             std::to_string(index.shard_bytes[e.shard]) + " bytes of shard " + f[0]);
    last_shard = e.shard;
    end_of_last = e.offset + e.length;
  }
  r.expectEnd(records);
  checkShardSizes(dir, index);
  return index;
}

void writeIndex(const std::string& dir, const RecordIndex& index) {
  PendingFiles pending(dir, {kIndexFile});
  std::ofstream out = pending.create(kIndexFile);
  writeIndexTo(out, pending.temp(kIndexFile), index);
  pending.commit();
}

ImageFolder scanImageFolder(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw DataError(dir + ": no such folder");
  ImageFolder folder;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_directory()) folder.classes.push_back(entry.path().filename().string());
  std::sort(folder.classes.begin(), folder.classes.end());
  for (std::size_t label = 0; label < folder.classes.size(); ++label) {
    std::vector<std::string> files;
    for (const auto& entry :
         fs::recursive_directory_iterator(fs::path(dir) / folder.classes[label]))
      if (entry.is_regular_file() && isJpegName(entry.path()))
        files.push_back(fs::relative(entry.path(), dir).string());
    std::sort(files.begin(), files.end());
    for (std::string& f : files) {
      // The index is tab- and line-separated.
      if (f.find_first_of("\t\n") != std::string::npos)
        throw DataError(dir + ": file name with a tab or newline: '" + f + "'");
      folder.files.push_back(std::move(f));
      folder.labels.push_back(static_cast<std::int32_t>(label));
    }
  }
  for (const std::string& c : folder.classes)
    if (c.find_first_of("\t\n") != std::string::npos)
      throw DataError(dir + ": class folder name with a tab or newline: '" + c + "'");
  if (folder.files.empty())
    throw DataError(dir + ": no .jpg or .jpeg files in class subfolders (expected " + dir +
                    "/<class>/<image>.jpg)");
  return folder;
}

RecordIndex packFolder(const std::string& src, const std::string& out_dir,
                       const PackOptions& options) {
  // "" would be the current folder to the calls below: the pack would land there.
  if (src.empty() || out_dir.empty())
    throw DataError(std::string("the ") + (src.empty() ? "source" : "output") +
                    " folder's name is empty");
  checkOutsideSource(src, out_dir);
  const ImageFolder folder = scanImageFolder(src);
  const std::int64_t n = static_cast<std::int64_t>(folder.files.size());
  std::uint64_t total = 0;
  for (const std::string& f : folder.files) total += fs::file_size(fs::path(src) / f);
  int shards = options.shards;
  if (shards <= 0)
    shards = static_cast<int>(
        std::max<std::uint64_t>(1, (total + kDefaultShardBytes - 1) / kDefaultShardBytes));
  if (shards > n)
    throw DataError("cannot pack " + std::to_string(n) + " images into " + std::to_string(shards) +
                    " shards: a shard needs at least one image");
  fs::create_directories(out_dir);
  removeStaleTemporaries(out_dir, options.removed_stale);
  std::vector<std::string> names;
  for (int s = 0; s < shards; ++s) names.push_back(shardName(s));
  names.push_back(kIndexFile);
  PendingFiles pending(out_dir, names);
  RecordIndex index;
  index.classes = folder.classes;
  const std::vector<std::int64_t> order = epochOrder(n, options.seed, 0);
  std::int64_t done = 0;
  std::vector<std::string> bad;  // "file: why"
  for (int s = 0; s < shards; ++s) {
    const std::string name = shardName(s);
    const fs::path path = pending.temp(name);
    std::ofstream out = pending.create(name);
    std::uint64_t offset = 0;
    // Shard s holds records [n*s/shards, n*(s+1)/shards) of the shuffled order.
    for (std::int64_t i = n * s / shards; i < n * (s + 1) / shards; ++i) {
      const std::size_t f = static_cast<std::size_t>(order[i]);
      const std::vector<std::uint8_t> bytes = readFile(fs::path(src) / folder.files[f]);
      const std::string why = jpegProblem(bytes);
      if (!why.empty() && options.skip_bad) {
        if (options.skipped) options.skipped(folder.files[f] + ": " + why);
        if (options.progress) options.progress(++done, n);
        continue;
      }
      if (!why.empty()) bad.push_back(folder.files[f] + ": " + why);
      writeBytes(out, bytes.data(), bytes.size(), path);
      RecordEntry e;
      e.shard = s;
      e.offset = offset;
      e.length = bytes.size();
      e.label = folder.labels[f];
      e.crc = static_cast<std::uint32_t>(crc32_z(0, bytes.data(), bytes.size()));
      e.source = folder.files[f];
      index.records.push_back(std::move(e));
      offset += bytes.size();
      if (options.progress) options.progress(++done, n);
    }
    finish(out, path);
    index.shards.push_back(name);
    index.shard_bytes.push_back(offset);
  }
  if (!bad.empty()) throw DataError(listBad(src, bad));
  std::ofstream out = pending.create(kIndexFile);
  writeIndexTo(out, pending.temp(kIndexFile), index);
  pending.commit();
  // Shards of an earlier, larger pack: nothing refers to them any more. The pack is
  // made, so one that cannot go is left rather than reported as a failed pack.
  std::error_code ignored;
  for (int s = shards; fs::remove(fs::path(out_dir) / shardName(s), ignored); ++s) {
  }
  return index;
}

}  // namespace accord::resnet
