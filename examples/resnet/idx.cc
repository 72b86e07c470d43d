// IDX reader; see idx.h. gzread reads plain files too, so an unpacked copy works.
#include "idx.h"

#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <type_traits>

namespace accord::resnet {
namespace {

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzPtr = std::unique_ptr<std::remove_pointer_t<gzFile>, GzCloser>;

// The largest payload accepted: about twice EMNIST "byclass" (697,932 images of 28x28,
// 547 MB), the largest file of the MNIST family. A header asking for more is corrupt.
constexpr std::size_t kMaxIdxBytes = std::size_t{1} << 30;
// Gzipped payloads are read in pieces of this size (see readPayload).
constexpr std::size_t kReadChunk = std::size_t{16} << 20;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw DataError(path + ": " + what);
}

[[noreturn]] void failGzip(gzFile f, const std::string& path, const char* what) {
  int errnum = 0;
  fail(path, std::string("corrupt gzip data while reading the ") + what + " (" +
                 gzerror(f, &errnum) + ")");
}

// Reads exactly n bytes or throws, telling truncation from a gzip error.
void readExactly(gzFile f, const std::string& path, void* out, std::size_t n, const char* what) {
  auto* p = static_cast<unsigned char*>(out);
  std::size_t got = 0;
  while (got < n) {
    const unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(n - got, 1u << 30));
    const int r = gzread(f, p + got, chunk);
    if (r < 0) failGzip(f, path, what);
    if (r == 0)
      fail(path, std::string("truncated: the ") + what + " ends after " + std::to_string(got) +
                     " of " + std::to_string(n) + " bytes");
    got += static_cast<std::size_t>(r);
  }
}

std::uint32_t bigEndian(const unsigned char* b) {
  return (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) | (std::uint32_t{b[2]} << 8) |
         std::uint32_t{b[3]};
}

// "10 x 28 x 28", as the header states it, for messages.
std::string describe(const std::vector<std::uint32_t>& dims) {
  std::string s;
  for (std::uint32_t d : dims) s += (s.empty() ? "" : " x ") + std::to_string(d);
  return s;
}

// The payload size the header declares, checked before anything is allocated: the
// product must not overflow and must fit the reader's limit.
std::size_t declaredBytes(const std::string& path, const std::vector<std::uint32_t>& dims) {
  std::size_t total = 1;
  for (std::uint32_t d : dims)
    if (__builtin_mul_overflow(total, std::size_t{d}, &total))
      fail(path, "corrupt header: the sizes " + describe(dims) + " overflow 64 bits");
  if (total == 0) fail(path, "corrupt header: the sizes " + describe(dims) + " hold no data");
  if (total > kMaxIdxBytes)
    fail(path, "the header declares " + describe(dims) + " = " + std::to_string(total) +
                   " bytes, more than the " + std::to_string(kMaxIdxBytes) +
                   " bytes an IDX file may hold here");
  return total;
}

// Reads the payload in pieces, so memory follows the bytes actually present (a gzip
// stream's decompressed size is unknown until it ends), never the header's claim.
std::vector<std::uint8_t> readPayload(gzFile f, const std::string& path,
                                      const std::string& declared, std::size_t total) {
  std::vector<std::uint8_t> data;
  while (data.size() < total) {
    const std::size_t got = data.size();
    data.resize(got + std::min(kReadChunk, total - got));
    const int r = gzread(f, data.data() + got, static_cast<unsigned>(data.size() - got));
    if (r < 0) failGzip(f, path, "data");
    data.resize(got + static_cast<std::size_t>(r));
    if (r == 0)
      fail(path, "truncated: the header declares " + declared + ", the file holds " +
                     std::to_string(got) + " bytes of data");
  }
  unsigned char extra;
  if (gzread(f, &extra, 1) > 0)
    fail(path, "corrupt: the header declares " + declared + ", the data continues past them");
  return data;
}

}  // namespace

IdxArray readIdx(const std::string& path) {
  if (!std::filesystem::exists(path)) fail(path, "no such file");
  GzPtr f(gzopen(path.c_str(), "rb"));
  if (!f) fail(path, "cannot open");
  unsigned char magic[4];
  readExactly(f.get(), path, magic, 4, "header");
  if (magic[0] != 0 || magic[1] != 0 || magic[2] != 0x08 || magic[3] < 1 || magic[3] > 4)
    fail(path, "not an IDX file of unsigned bytes (bad magic number)");
  IdxArray out;
  for (int d = 0; d < magic[3]; ++d) {
    unsigned char b[4];
    readExactly(f.get(), path, b, 4, "header");
    out.dims.push_back(bigEndian(b));
  }
  const std::size_t total = declaredBytes(path, out.dims);
  const std::string declared = describe(out.dims) + " = " + std::to_string(total) + " bytes";
  // An uncompressed file's payload size is known up front: no reading needed to refuse.
  if (gzdirect(f.get())) {
    const std::size_t held = std::filesystem::file_size(path) - 4 * (1 + out.dims.size());
    if (held != total)
      fail(path, std::string(held < total ? "truncated" : "corrupt") + ": the header declares " +
                     declared + ", the file holds " + std::to_string(held) + " bytes of data");
  }
  out.data = readPayload(f.get(), path, declared, total);
  return out;
}

ImageSet loadFashionMnist(const std::string& dir, bool train, const std::string& dir_flag) {
  const std::string prefix = dir + "/" + (train ? "train" : "t10k");
  const std::string image_path = prefix + "-images-idx3-ubyte.gz";
  const std::string label_path = prefix + "-labels-idx1-ubyte.gz";
  for (const std::string& path : {image_path, label_path})
    if (!std::filesystem::exists(path))
      fail(path, "no such file (install the Debian package dataset-fashion-mnist or pass " +
                     dir_flag + ")");
  IdxArray images = readIdx(image_path);
  IdxArray labels = readIdx(label_path);
  if (images.dims.size() != 3) fail(image_path, "expected 3 dimensions (n, rows, cols)");
  if (labels.dims.size() != 1) fail(label_path, "expected 1 dimension (n)");
  if (images.dims[0] != labels.dims[0])
    fail(label_path, std::to_string(labels.dims[0]) + " labels for " +
                         std::to_string(images.dims[0]) + " images in " + image_path);
  // The model's input and the padding for --image-size assume the dataset's own size.
  if (images.dims[1] != 28 || images.dims[2] != 28)
    fail(image_path, "images of " + std::to_string(images.dims[1]) + "x" +
                         std::to_string(images.dims[2]) + "; Fashion-MNIST's are 28x28");
  ImageSet set;
  set.n = static_cast<int>(images.dims[0]);
  set.H = static_cast<int>(images.dims[1]);
  set.W = static_cast<int>(images.dims[2]);
  set.classes = 10;
  set.pixels = std::move(images.data);
  set.labels.resize(set.n);
  for (int i = 0; i < set.n; ++i) {
    if (labels.data[i] >= 10)
      fail(label_path, "corrupt: label " + std::to_string(labels.data[i]) + " at index " +
                           std::to_string(i) + " is not in [0, 10)");
    set.labels[i] = labels.data[i];
  }
  return set;
}

}  // namespace accord::resnet
