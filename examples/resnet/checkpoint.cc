// Checkpoint file format and atomic write; see checkpoint.h.
#include "checkpoint.h"

#include "unlink_on_signal.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <utility>

namespace accord::resnet {
namespace {

constexpr char kMagic[8] = {'A', 'C', 'C', 'O', 'R', 'D', 'C', 'K'};

template <typename T>
void put(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

void putString(std::string& out, const std::string& s) {
  put(out, static_cast<std::uint32_t>(s.size()));
  out += s;
}

// Bounds-checked reader over the file's bytes.
class Reader {
 public:
  Reader(const std::string& path, const std::string& bytes) : path_(path), bytes_(bytes) {}
  template <typename T>
  T get(const char* what) {
    T v;
    need(sizeof(T), what);
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string getString(const char* what) {
    const auto n = get<std::uint32_t>(what);
    need(n, what);
    std::string s = bytes_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  void getFloats(float* out, std::size_t n, const char* what) {
    need(n * sizeof(float), what);
    std::memcpy(out, bytes_.data() + pos_, n * sizeof(float));
    pos_ += n * sizeof(float);
  }

 private:
  void need(std::size_t n, const char* what) {
    if (pos_ + n > bytes_.size() - sizeof(std::uint32_t))
      throw CheckpointError(path_ + ": corrupt checkpoint: " + what + " runs past the end");
  }
  const std::string& path_;
  const std::string& bytes_;
  std::size_t pos_ = sizeof(kMagic);
};

std::uint32_t crcOf(const char* data, std::size_t n) {
  uLong crc = crc32(0L, Z_NULL, 0);
  while (n > 0) {
    const auto chunk = static_cast<uInt>(std::min<std::size_t>(n, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data), chunk);
    data += chunk;
    n -= chunk;
  }
  return static_cast<std::uint32_t>(crc);
}

[[noreturn]] void sysFail(const std::string& what, const std::string& path) {
  throw CheckpointError("cannot " + what + " " + path + ": " + std::strerror(errno));
}

void writeAll(int fd, const std::string& bytes, const std::string& path) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t r = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) sysFail("write", path);
    done += static_cast<std::size_t>(r);
  }
}

// Creates the temporary file beside the target, never through an existing name:
// O_EXCL | O_NOFOLLOW refuse a file or symlink already there (planted, or left by a
// crash), which O_TRUNC would have followed and overwritten. Such a name is left alone
// and a random one tried; 16 tries make a collision by chance impossible in practice.
std::pair<int, std::string> createTemp(const std::string& path) {
  const std::string base = path + ".tmp." + std::to_string(::getpid());
  std::random_device random;
  for (int attempt = 0; attempt < 16; ++attempt) {
    const std::string name = attempt == 0 ? base : base + "." + std::to_string(random());
    const int fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0) return {fd, name};
    if (errno != EEXIST) sysFail("create", name);
  }
  throw CheckpointError("cannot create a temporary file beside " + path + ": " + base +
                        " and 15 random variants of it exist already");
}

void fsyncDir(const std::filesystem::path& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);  // best effort: some file systems refuse directory fsync
    ::close(fd);
  }
}

}  // namespace

void saveCheckpoint(const std::string& path, const std::string& description,
                    const TrainState& state, const std::vector<TensorRef>& tensors,
                    const StepGeometry& geometry) {
  std::string out(kMagic, sizeof(kMagic));
  put(out, kCheckpointVersion);
  putString(out, description);
  put(out, state.epoch);
  put(out, state.step_in_epoch);
  put(out, state.global_step);
  put(out, geometry.batch_size);
  put(out, geometry.ranks);
  put(out, geometry.train_size);
  put(out, state.loss_scale);
  put(out, state.loss_scale_good_steps);
  put(out, static_cast<std::uint32_t>(tensors.size()));
  for (const TensorRef& t : tensors) {
    putString(out, t.name);
    put(out, static_cast<std::uint64_t>(t.n));
    out.append(reinterpret_cast<const char*>(t.data), t.n * sizeof(float));
  }
  put(out, crcOf(out.data(), out.size()));

  const std::filesystem::path target(path);
  const auto [fd, tmp] = createTemp(path);
  UnlinkOnSignal guard({tmp});  // a signal while it is written removes it
  guard.exist(1);
  try {
    writeAll(fd, out, tmp);
    if (::fsync(fd) != 0) sysFail("fsync", tmp);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0) sysFail("close", tmp);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) sysFail("rename " + tmp + " to", path);
  fsyncDir(target.parent_path());
}

void checkWritable(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw CheckpointError(path + " is a directory; name a file in it");
  const auto [fd, tmp] = createTemp(path);
  ::close(fd);
  ::unlink(tmp.c_str());
}

CheckpointContents readCheckpoint(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))  // opens, then fails its first read
    throw CheckpointError(path + " is a directory, not a checkpoint file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CheckpointError(path + ": cannot open checkpoint (" + std::strerror(errno) + ")");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < sizeof(kMagic) + 8 || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0)
    throw CheckpointError(path + ": not an accord-resnet checkpoint (bad magic)");
  std::uint32_t stored_crc;
  std::memcpy(&stored_crc, bytes.data() + bytes.size() - 4, 4);
  if (crcOf(bytes.data(), bytes.size() - 4) != stored_crc)
    throw CheckpointError(path + ": corrupt or truncated checkpoint (checksum mismatch, " +
                          std::to_string(bytes.size()) + " bytes)");
  Reader r(path, bytes);
  const auto version = r.get<std::uint32_t>("version");
  if (version < 1 || version > kCheckpointVersion)
    throw CheckpointError(path + ": checkpoint version " + std::to_string(version) +
                          ", this build reads versions 1 to " + std::to_string(kCheckpointVersion));
  CheckpointContents c;
  c.description = r.getString("model description");
  c.state.epoch = r.get<std::int64_t>("epoch");
  c.state.step_in_epoch = r.get<std::int64_t>("step");
  c.state.global_step = r.get<std::int64_t>("global step");
  if (version >= 2) {
    c.geometry.batch_size = r.get<std::int64_t>("batch size");
    c.geometry.ranks = r.get<std::int64_t>("rank count");
    c.geometry.train_size = r.get<std::int64_t>("training-set size");
  }
  if (version >= 3) {
    c.state.loss_scale = r.get<double>("loss scale");
    c.state.loss_scale_good_steps = r.get<std::int64_t>("loss scale's good steps");
  }
  const auto count = r.get<std::uint32_t>("tensor count");
  for (std::uint32_t i = 0; i < count; ++i) {
    c.names.push_back(r.getString("tensor name"));
    const auto n = r.get<std::uint64_t>("tensor size");
    if (n > bytes.size()) throw CheckpointError(path + ": corrupt checkpoint: tensor size");
    c.values.emplace_back(n);
    r.getFloats(c.values.back().data(), n, "tensor data");
  }
  return c;
}

void checkResumable(const std::string& path, const StepGeometry& saved, const StepGeometry& run) {
  if (saved.batch_size == 0 || run.batch_size == 0) return;
  auto batch = [](const StepGeometry& g) {
    return "global batch " + std::to_string(g.globalBatch()) + " (--batch-size " +
           std::to_string(g.batch_size) + " x " + std::to_string(g.ranks) + " ranks)";
  };
  if (saved.globalBatch() != run.globalBatch())
    throw CheckpointError(
        path + ": written at " + batch(saved) + ", this run has " + batch(run) +
        "; the checkpoint's epoch position and LR schedule count steps of " +
        std::to_string(saved.globalBatch()) +
        " samples, so resume with --batch-size x ranks = " + std::to_string(saved.globalBatch()));
  if (saved.train_size != run.train_size)
    throw CheckpointError(path + ": written for a training set of " +
                          std::to_string(saved.train_size) + " samples, this run has " +
                          std::to_string(run.train_size) +
                          " (--dataset, --train-limit, --synthetic-size); the checkpoint's epoch "
                          "position would point at other samples");
}

TrainState loadCheckpoint(const std::string& path, const std::string& description,
                          const std::vector<TensorRef>& tensors, const StepGeometry& run) {
  CheckpointContents c = readCheckpoint(path);
  if (c.description != description)
    throw CheckpointError(path + ": checkpoint is of a different model: '" + c.description +
                          "', this run is '" + description + "'");
  checkResumable(path, c.geometry, run);
  if (c.names.size() != tensors.size())
    throw CheckpointError(path + ": checkpoint holds " + std::to_string(c.names.size()) +
                          " tensors, the model expects " + std::to_string(tensors.size()));
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const TensorRef& t = tensors[i];
    if (c.names[i] != t.name || c.values[i].size() != t.n)
      throw CheckpointError(
          path + ": checkpoint tensor '" + c.names[i] + "' (" + std::to_string(c.values[i].size()) +
          " values) where the model expects '" + t.name + "' (" + std::to_string(t.n) + ")");
  }
  for (std::size_t i = 0; i < tensors.size(); ++i)
    std::copy(c.values[i].begin(), c.values[i].end(), tensors[i].data);
  return c.state;
}

TensorDiff compareTensors(const CheckpointContents& a, const CheckpointContents& b, double atol,
                          double rtol) {
  TensorDiff d;
  d.tensors = a.names.size();
  const auto described = [](const CheckpointContents& c, std::size_t t) {
    return "'" + c.names[t] + "' (" + std::to_string(c.values[t].size()) + " values)";
  };
  for (std::size_t t = 0; d.same_tensors && t < std::min(a.names.size(), b.names.size()); ++t)
    if (a.names[t] != b.names[t] || a.values[t].size() != b.values[t].size()) {
      d.same_tensors = false;
      d.mismatch = "tensor " + std::to_string(t) + " is " + described(a, t) + " in the first, " +
                   described(b, t) + " in the second";
    }
  if (d.same_tensors && a.names.size() != b.names.size()) {
    d.same_tensors = false;
    d.mismatch = std::to_string(a.names.size()) + " tensors in the first, " +
                 std::to_string(b.names.size()) + " in the second";
  }
  if (!d.same_tensors) return d;
  double worst_excess = -std::numeric_limits<double>::infinity();
  for (std::size_t t = 0; t < a.names.size(); ++t) {
    for (std::size_t i = 0; i < a.values[t].size(); ++i) {
      const double x = a.values[t][i], y = b.values[t][i];
      // Arithmetic on NaN or inf gives NaN, and "NaN > worst" is false: test explicitly.
      const bool finite = std::isfinite(x) && std::isfinite(y);
      const double diff = finite ? std::fabs(x - y) : std::numeric_limits<double>::infinity();
      const double excess = finite ? diff - (atol + rtol * std::fabs(y)) : diff;
      d.max_abs = std::max(d.max_abs, diff);
      if (excess > worst_excess) {
        worst_excess = excess;
        d.tightest = a.names[t];
      }
    }
  }
  d.equal = !(worst_excess > 0);
  return d;
}

}  // namespace accord::resnet
