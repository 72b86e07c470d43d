// Folder and packed JPEG sources; see jpeg_source.h.
//
// Thread boundary: fill() runs on the loader's decode workers, several at once, so
// the sources hold nothing mutable; shards are mapped read-only once, and each call
// works on its own buffers.
#include "jpeg_source.h"

#include "augment.h"
#include "jpeg.h"
#include "records.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace accord::resnet {
namespace {

namespace fs = std::filesystem;

// Decodes one JPEG at the smallest scale its crop allows and writes it to out.
void decodeSample(const std::uint8_t* bytes, std::size_t size, int S, bool augment,
                  std::uint64_t seed, float* out) {
  CropBox box;
  int full_w = 0, full_h = 0;
  const RgbImage img = decodeJpeg(bytes, size, [&](int w, int h) {
    full_w = w;
    full_h = h;
    box = augment ? randomResizedCrop(w, h, seed) : centerCrop(w, h);
    return DecodePlan{pickScale(box.w, box.h, S, S), box};
  });
  cropResize(img, full_w, full_h, box, S, augment && randomFlip(seed), Normalize{}, out);
}

// 256 MiB: far above any photo; reading a larger file whole would only exhaust memory.
constexpr off_t kMaxFileBytes = off_t{256} << 20;

std::vector<std::uint8_t> readWhole(const fs::path& path) {
  std::vector<std::uint8_t> bytes;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0) {
    const int e = errno;
    if (fd >= 0) ::close(fd);
    throw BadRecord(path.string() + " (offset 0): cannot open: " + std::strerror(e));
  }
  if (st.st_size > kMaxFileBytes) {
    ::close(fd);
    throw BadRecord(path.string() + " (offset 0, " + std::to_string(st.st_size) +
                    " bytes): larger than the " + std::to_string(kMaxFileBytes) +
                    " bytes allowed for one image");
  }
  bytes.resize(static_cast<std::size_t>(st.st_size));
  std::size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t r = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (r <= 0) {
      const int e = r < 0 ? errno : 0;
      ::close(fd);
      throw BadRecord(path.string() + " (offset " + std::to_string(got) +
                      "): " + (r < 0 ? std::strerror(e) : "the file shrank while being read"));
    }
    got += static_cast<std::size_t>(r);
  }
  ::close(fd);
  return bytes;
}

class JpegSource : public ImageSource {
 public:
  JpegSource(int S, int classes) : S_(S), classes_(classes) {
    if (S_ < 1) throw std::invalid_argument("--image-size must be positive");
  }
  int channels() const override { return 3; }
  int imageSize() const override { return S_; }
  int classes() const override { return classes_; }

 protected:
  int S_, classes_;
};

class FolderSource : public JpegSource {
 public:
  FolderSource(const std::string& dir, ImageFolder folder, int S)
      : JpegSource(S, static_cast<int>(folder.classes.size())),
        dir_(dir),
        folder_(std::move(folder)) {}
  std::int64_t size() const override { return static_cast<std::int64_t>(folder_.files.size()); }
  std::vector<std::string> classNames() const override { return folder_.classes; }

  std::int32_t fill(std::int64_t index, bool augment, std::uint64_t aug_seed,
                    float* out) const override {
    const fs::path path = fs::path(dir_) / folder_.files[static_cast<std::size_t>(index)];
    const std::vector<std::uint8_t> bytes = readWhole(path);
    try {
      decodeSample(bytes.data(), bytes.size(), S_, augment, aug_seed, out);
    } catch (const JpegError& e) {
      throw BadRecord(path.string() + " (offset 0, " + std::to_string(bytes.size()) +
                      " bytes): not a usable JPEG: " + e.what());
    }
    return folder_.labels[static_cast<std::size_t>(index)];
  }

 private:
  std::string dir_;
  ImageFolder folder_;
};

// A shard file mapped read-only for the source's lifetime.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) : path_(path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw DataError(path + ": cannot open: " + std::strerror(errno));
    struct stat st {};
    ::fstat(fd, &st);
    size_ = static_cast<std::size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        const int e = errno;
        ::close(fd);
        throw DataError(path + ": cannot map: " + std::strerror(e));
      }
      data_ = static_cast<const std::uint8_t*>(p);
      // Each rank reads its shards front to back: let the kernel read ahead.
      ::madvise(const_cast<std::uint8_t*>(data_), size_, MADV_SEQUENTIAL);
    }
    ::close(fd);
  }
  ~MappedFile() {
    if (data_) ::munmap(const_cast<std::uint8_t*>(data_), size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

class PackedSource : public JpegSource {
 public:
  PackedSource(const std::string& dir, RecordIndex index, int S)
      : JpegSource(S, static_cast<int>(index.classes.size())), index_(std::move(index)) {
    for (const std::string& name : index_.shards)
      shards_.push_back(std::make_unique<MappedFile>((fs::path(dir) / name).string()));
    for (const RecordEntry& e : index_.records) {
      if (sizes_.size() <= static_cast<std::size_t>(e.shard)) sizes_.resize(e.shard + 1, 0);
      ++sizes_[e.shard];
    }
  }
  std::int64_t size() const override { return static_cast<std::int64_t>(index_.records.size()); }
  std::vector<std::string> classNames() const override { return index_.classes; }
  std::vector<std::int64_t> shardSizes() const override { return sizes_; }

  std::int32_t fill(std::int64_t index, bool augment, std::uint64_t aug_seed,
                    float* out) const override {
    const RecordEntry& e = index_.records[static_cast<std::size_t>(index)];
    const MappedFile& shard = *shards_[static_cast<std::size_t>(e.shard)];
    const std::string where = shard.path() + " (offset " + std::to_string(e.offset) + ", " +
                              std::to_string(e.length) + " bytes, record " + std::to_string(index) +
                              " from " + e.source + ")";
    if (e.offset + e.length > shard.size())
      throw BadRecord(where + ": truncated: the shard holds " + std::to_string(shard.size()) +
                      " bytes");
    const std::uint8_t* bytes = shard.data() + e.offset;
    const auto crc = static_cast<std::uint32_t>(crc32_z(0, bytes, e.length));
    if (crc != e.crc) {
      char msg[96];
      std::snprintf(msg, sizeof(msg), ": corrupt: CRC-32 %08x, the index says %08x", crc, e.crc);
      throw BadRecord(where + msg);
    }
    try {
      decodeSample(bytes, e.length, S_, augment, aug_seed, out);
    } catch (const JpegError& err) {
      throw BadRecord(where + ": not a usable JPEG: " + err.what());
    }
    return e.label;
  }

 private:
  RecordIndex index_;
  std::vector<std::unique_ptr<MappedFile>> shards_;
  std::vector<std::int64_t> sizes_;
};

}  // namespace

std::unique_ptr<ImageSource> makeJpegFolder(const std::string& dir, int image_size) {
  return std::make_unique<FolderSource>(dir, scanImageFolder(dir), image_size);
}

std::unique_ptr<ImageSource> makePacked(const std::string& dir, int image_size) {
  return std::make_unique<PackedSource>(dir, readIndex(dir), image_size);
}

}  // namespace accord::resnet
