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

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw DataError(path + ": " + what);
}

// Reads exactly n bytes or throws, telling truncation from a gzip error.
void readExactly(gzFile f, const std::string& path, void* out, std::size_t n, const char* what) {
  auto* p = static_cast<unsigned char*>(out);
  std::size_t got = 0;
  while (got < n) {
    const unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(n - got, 1u << 30));
    const int r = gzread(f, p + got, chunk);
    if (r < 0) {
      int errnum = 0;
      const char* msg = gzerror(f, &errnum);
      fail(path, std::string("corrupt gzip data while reading the ") + what + " (" + msg + ")");
    }
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

}  // namespace

IdxArray readIdx(const std::string& path) {
  if (!std::filesystem::exists(path))
    fail(path,
         "no such file (install the Debian package dataset-fashion-mnist or pass "
         "--data-dir)");
  GzPtr f(gzopen(path.c_str(), "rb"));
  if (!f) fail(path, "cannot open");
  unsigned char magic[4];
  readExactly(f.get(), path, magic, 4, "header");
  if (magic[0] != 0 || magic[1] != 0 || magic[2] != 0x08 || magic[3] < 1 || magic[3] > 4)
    fail(path, "not an IDX file of unsigned bytes (bad magic number)");
  IdxArray out;
  std::size_t total = 1;
  for (int d = 0; d < magic[3]; ++d) {
    unsigned char b[4];
    readExactly(f.get(), path, b, 4, "header");
    out.dims.push_back(bigEndian(b));
    total *= out.dims.back();
  }
  if (total == 0 || total > (std::size_t{1} << 34)) fail(path, "implausible dimensions");
  out.data.resize(total);
  readExactly(f.get(), path, out.data.data(), total, "data");
  unsigned char extra;
  if (gzread(f.get(), &extra, 1) > 0) fail(path, "corrupt: data continues past the declared size");
  return out;
}

ImageSet loadFashionMnist(const std::string& dir, bool train) {
  const std::string prefix = dir + "/" + (train ? "train" : "t10k");
  const std::string image_path = prefix + "-images-idx3-ubyte.gz";
  const std::string label_path = prefix + "-labels-idx1-ubyte.gz";
  IdxArray images = readIdx(image_path);
  IdxArray labels = readIdx(label_path);
  if (images.dims.size() != 3) fail(image_path, "expected 3 dimensions (n, rows, cols)");
  if (labels.dims.size() != 1) fail(label_path, "expected 1 dimension (n)");
  if (images.dims[0] != labels.dims[0])
    fail(label_path, std::to_string(labels.dims[0]) + " labels for " +
                         std::to_string(images.dims[0]) + " images in " + image_path);
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
