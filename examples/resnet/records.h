// The packed record format: a folder of JPEGs (one subfolder per class) stored as a
// few large shard files plus one index, so that a rank reads a few big files front to
// back instead of opening a million small ones.
//
//   <dir>/shard-00000.rec ...   the JPEG files' bytes, back to back, nothing between
//   <dir>/index.tsv             text, tab-separated:
//       accord-records 1
//       classes <K>          then K lines: the class names, label = line number
//       shards <S>           then S lines: <file name> <bytes>
//       records <N>          then N lines: <shard> <offset> <length> <label> <crc32> <source>
//
// The index is text so that `head` and `grep` can answer where a record came from;
// the CRC-32 (zlib's) of each record's bytes catches a shard damaged after packing.
// Records are stored in a shuffled order (seeded), so that any run of consecutive
// records, which is what one rank reads, holds every class.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace accord::resnet {

inline constexpr const char* kIndexFile = "index.tsv";

struct RecordEntry {
  int shard = 0;
  std::uint64_t offset = 0, length = 0;  // in the shard file
  std::int32_t label = 0;
  std::uint32_t crc = 0;  // CRC-32 of the record's bytes
  std::string source;     // the packed file, relative to the packed folder
  bool operator==(const RecordEntry&) const = default;
};

struct RecordIndex {
  std::vector<std::string> classes;
  std::vector<std::string> shards;         // file names inside the packed folder
  std::vector<std::uint64_t> shard_bytes;  // each shard's size when written
  std::vector<RecordEntry> records;        // grouped by shard, in file order
};

// Reads and checks <dir>/index.tsv: every field parsed, shards and labels in range,
// records in file order without overlaps and inside their shard, nothing after the
// records announced, and no shard file longer than the index says. Throws DataError
// naming the file and line.
RecordIndex readIndex(const std::string& dir);
// Replaces <dir>/index.tsv whole (a temporary file renamed over it).
void writeIndex(const std::string& dir, const RecordIndex& index);

// An ImageNet-style folder: sorted class subfolders, sorted .jpg/.jpeg files in each.
struct ImageFolder {
  std::vector<std::string> classes;
  std::vector<std::string> files;  // relative to the folder
  std::vector<std::int32_t> labels;
};
// Throws DataError if dir is missing or holds no class with a JPEG in it.
ImageFolder scanImageFolder(const std::string& dir);

struct PackOptions {
  int shards = 0;  // 0: enough for about kDefaultShardBytes each
  std::uint64_t seed = 0;
  // Called after each record with (records done, records in all).
  std::function<void(std::int64_t, std::int64_t)> progress;
  // A file that is no JPEG the trainer can decode is left out ("file: why" passed here)
  // rather than failing the pack.
  bool skip_bad = false;
  std::function<void(const std::string&)> skipped;
  // Called with the path of each temporary file that a pack killed before it could
  // clean up left in out_dir, as it is removed.
  std::function<void(const std::string&)> removed_stale;
};
inline constexpr std::uint64_t kDefaultShardBytes = 256ull << 20;

// Packs folder src into out_dir (created if missing). Returns the index it wrote. A
// pack already there is replaced only once the new one is complete: on any error
// (an unwritable shard, a file that is no JPEG the trainer can decode, which are all
// named) or on SIGINT, SIGTERM or SIGHUP it is left as it was, and the new pack's
// temporary files are removed. Throws DataError.
RecordIndex packFolder(const std::string& src, const std::string& out_dir,
                       const PackOptions& options);

}  // namespace accord::resnet
