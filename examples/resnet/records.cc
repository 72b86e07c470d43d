// Packing folders into shards and reading the index; see records.h.
#include "records.h"

#include "data.h"
#include "idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

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

// One line of the index, split on tabs, with its number for messages.
class IndexReader {
 public:
  explicit IndexReader(const std::string& path) : path_(path), in_(path) {
    if (!in_) throw DataError(path + ": cannot open: " + std::strerror(errno));
  }
  std::vector<std::string> next(std::size_t fields) {
    std::string line;
    if (!std::getline(in_, line)) fail("ends early (truncated index?)");
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

}  // namespace

RecordIndex readIndex(const std::string& dir) {
  IndexReader r((fs::path(dir) / kIndexFile).string());
  RecordIndex index;
  if (auto f = r.next(2); f[0] != "accord-records" || f[1] != "1")
    r.fail("not an accord-records version 1 index");
  index.classes.resize(r.section("classes", kMaxCount));
  for (std::string& c : index.classes) c = r.next(1)[0];
  const std::uint64_t shards = r.section("shards", kMaxCount);
  for (std::uint64_t i = 0; i < shards; ++i) {
    auto f = r.next(2);
    if (f[0].empty() || f[0].find('/') != std::string::npos)
      r.fail("bad shard name '" + f[0] + "'");
    index.shards.push_back(f[0]);
    index.shard_bytes.push_back(r.number(f[1], UINT64_MAX));
  }
  index.records.resize(r.section("records", kMaxCount));
  std::uint64_t end_of_last = 0;
  int last_shard = 0;
  for (RecordEntry& e : index.records) {
    auto f = r.next(6);
    e.shard = static_cast<int>(r.number(f[0], shards == 0 ? 0 : shards - 1));
    e.offset = r.number(f[1], UINT64_MAX);
    e.length = r.number(f[2], UINT64_MAX - e.offset);
    e.label = static_cast<std::int32_t>(r.number(f[3], index.classes.size() - 1));
    e.crc = static_cast<std::uint32_t>(r.number(f[4], UINT32_MAX, 16));
    e.source = f[5];
    if (shards == 0 || index.classes.empty()) r.fail("a record, but no shards or classes");
    if (e.shard < last_shard || (e.shard == last_shard && e.offset < end_of_last))
      r.fail("records out of file order (shard " + f[0] + ", offset " + f[1] + ")");
    last_shard = e.shard;
    end_of_last = e.offset + e.length;
  }
  return index;
}

void writeIndex(const std::string& dir, const RecordIndex& index) {
  const fs::path path = fs::path(dir) / kIndexFile;
  std::ofstream out(path);
  out << "accord-records\t1\nclasses\t" << index.classes.size() << "\n";
  for (const std::string& c : index.classes) out << c << "\n";
  out << "shards\t" << index.shards.size() << "\n";
  for (std::size_t i = 0; i < index.shards.size(); ++i)
    out << index.shards[i] << "\t" << index.shard_bytes[i] << "\n";
  out << "records\t" << index.records.size() << "\n";
  char crc[16];
  for (const RecordEntry& e : index.records) {
    std::snprintf(crc, sizeof(crc), "%08x", e.crc);
    out << e.shard << "\t" << e.offset << "\t" << e.length << "\t" << e.label << "\t" << crc << "\t"
        << e.source << "\n";
  }
  out.close();
  if (!out) throw DataError(path.string() + ": write failed: " + std::strerror(errno));
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
  RecordIndex index;
  index.classes = folder.classes;
  const std::vector<std::int64_t> order = epochOrder(n, options.seed, 0);
  std::int64_t done = 0;
  for (int s = 0; s < shards; ++s) {
    char name[32];
    std::snprintf(name, sizeof(name), "shard-%05d.rec", s);
    const fs::path path = fs::path(out_dir) / name;
    std::ofstream out(path, std::ios::binary);
    if (!out) throw DataError(path.string() + ": cannot create: " + std::strerror(errno));
    std::uint64_t offset = 0;
    // Shard s holds records [n*s/shards, n*(s+1)/shards) of the shuffled order.
    for (std::int64_t i = n * s / shards; i < n * (s + 1) / shards; ++i) {
      const std::size_t f = static_cast<std::size_t>(order[i]);
      const std::vector<std::uint8_t> bytes = readFile(fs::path(src) / folder.files[f]);
      out.write(reinterpret_cast<const char*>(bytes.data()),
                static_cast<std::streamsize>(bytes.size()));
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
    out.close();
    if (!out) throw DataError(path.string() + ": write failed: " + std::strerror(errno));
    index.shards.push_back(name);
    index.shard_bytes.push_back(offset);
  }
  writeIndex(out_dir, index);
  return index;
}

}  // namespace accord::resnet
