// Metrics output; see metrics.h.
#include "metrics.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace accord::resnet {
namespace {

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

// JSON has no NaN or infinity: printf's "nan" and "inf" would make the line unreadable
// to every JSON parser, so a value that is not a number is written as null.
std::string json(double v, int digits) { return std::isfinite(v) ? fixed(v, digits) : "null"; }

}  // namespace

std::string jsonQuoted(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string toJson(const EpochReport& r) {
  std::ostringstream o;
  o << "{\"epoch\":" << r.epoch << ",\"steps\":" << r.steps
    << ",\"skipped_steps\":" << r.skipped_steps << ",\"skipped_samples\":" << r.skipped_samples
    << ",\"global_step\":" << r.global_step << ",\"lr\":" << json(r.lr, 8)
    << ",\"train_loss\":" << json(r.train_loss, 6) << ",\"train_acc\":" << json(r.train_acc, 6);
  if (r.has_val) {
    o << ",\"val_loss\":" << json(r.val_loss, 6) << ",\"val_top1\":" << json(r.val_top1, 6);
    if (r.has_top5) o << ",\"val_top5\":" << json(r.val_top5, 6);
  }
  o << ",\"seconds\":" << json(r.seconds, 3) << ",\"images_per_sec\":" << json(r.images_per_sec, 2)
    << ",\"images_per_sec_per_rank\":" << json(r.images_per_sec_rank, 2)
    << ",\"compute_s\":" << json(r.compute_s, 3) << ",\"comm_wait_s\":" << json(r.comm_wait_s, 3)
    << ",\"data_wait_s\":" << json(r.data_wait_s, 3) << ",\"ranks\":" << r.world
    << ",\"images\":" << json(r.images, 0) << ",\"batch_size\":" << r.run.batch_size
    << ",\"global_batch\":" << static_cast<std::int64_t>(r.run.batch_size) * r.world
    << ",\"schedule\":" << jsonQuoted(r.run.schedule) << ",\"model\":" << jsonQuoted(r.run.model)
    << ",\"dataset\":" << jsonQuoted(r.run.dataset) << ",\"image_size\":" << r.run.image_size
    << ",\"device\":" << jsonQuoted(r.run.device) << "}";
  return o.str();
}

std::string toLine(const EpochReport& r) {
  std::ostringstream o;
  o << "epoch " << r.epoch << "  lr " << fixed(r.lr, 5) << "  train loss " << fixed(r.train_loss, 4)
    << " acc " << fixed(100 * r.train_acc, 2) << "%";
  if (r.skipped_steps > 0) o << " (" << r.skipped_steps << " non-finite steps skipped)";
  if (r.skipped_samples > 0) o << " (" << r.skipped_samples << " bad samples skipped)";
  if (r.has_val) {
    o << "  test top-1 " << fixed(100 * r.val_top1, 2) << "%";
    if (r.has_top5) o << " top-5 " << fixed(100 * r.val_top5, 2) << "%";
  }
  o << "  " << fixed(r.images_per_sec, 1) << " img/s (" << fixed(r.images_per_sec_rank, 1)
    << "/rank)  time " << fixed(r.seconds, 1) << "s: compute " << fixed(r.compute_s, 1)
    << "s, comm wait " << fixed(r.comm_wait_s, 1) << "s, data wait " << fixed(r.data_wait_s, 1)
    << "s";
  return o.str();
}

bool progressBarWanted() {
  const char* env = std::getenv("ACCORD_PROGRESS");
  if (env && *env) {
    const std::string v = env;
    if (v == "1") return true;
    if (v == "0") return false;
    throw std::invalid_argument("ACCORD_PROGRESS='" + v + "': expected 0 (no bar) or 1 (a bar)");
  }
  // Under a launcher a rank's stdout is often a pseudo-terminal that mpirun copies into
  // wherever its own output goes (a log file, a CI job), so isatty() says nothing about
  // whether a person watches. accordrun, which does know, sets ACCORD_PROGRESS=1.
  const bool launched = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") ||
                        std::getenv("PMIX_RANK") || std::getenv("SLURM_PROCID");
  return !launched && ::isatty(STDOUT_FILENO);
}

namespace {
std::FILE* openForWriting(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f)
    throw std::runtime_error("cannot open --metrics file " + path + ": " + std::strerror(errno));
  return f;
}

// The epoch of a line toJson wrote ({"epoch":3,...}); 0 for anything else.
std::int64_t epochOf(const std::string& line) {
  constexpr char kHead[] = "{\"epoch\":";
  if (line.compare(0, sizeof(kHead) - 1, kHead) != 0) return 0;
  return std::strtoll(line.c_str() + sizeof(kHead) - 1, nullptr, 10);
}
}  // namespace

Metrics::Metrics(bool enabled, const std::string& jsonl_path, bool progress, bool resuming)
    : enabled_(enabled), bar_(enabled && progress && progressBarWanted()) {
  if (!enabled_ || jsonl_path.empty()) return;
  path_ = jsonl_path;
  if (!resuming) jsonl_ = openForWriting(path_);
}

int Metrics::resumed(std::int64_t epochs_done) {
  if (path_.empty() || jsonl_) return 0;
  std::vector<std::string> kept;
  std::ifstream in(path_);
  for (std::string line; std::getline(in, line);) {
    const std::int64_t e = epochOf(line);
    if (e >= 1 && e <= epochs_done) kept.push_back(line);
  }
  in.close();
  // Into a file beside it, renamed over it once whole: a failed write loses nothing.
  const std::string tmp = path_ + ".tmp";
  std::FILE* f = openForWriting(tmp);
  for (const std::string& line : kept) std::fprintf(f, "%s\n", line.c_str());
  const bool written = std::fflush(f) == 0 && !std::ferror(f);
  const int error = errno;
  std::fclose(f);
  if (!written || std::rename(tmp.c_str(), path_.c_str()) != 0) {
    const std::string why = std::strerror(written ? errno : error);
    std::remove(tmp.c_str());
    throw std::runtime_error("--metrics file " + path_ + ": write failed: " + why);
  }
  jsonl_ = std::fopen(path_.c_str(), "a");
  if (!jsonl_)
    throw std::runtime_error("cannot open --metrics file " + path_ + ": " + std::strerror(errno));
  return static_cast<int>(kept.size());
}

Metrics::~Metrics() {
  if (jsonl_) std::fclose(jsonl_);
}

void Metrics::clearBar() {
  if (bar_drawn_) std::fputs("\r\033[K", stdout);
  bar_drawn_ = false;
}

void Metrics::step(int epoch, std::int64_t step, std::int64_t steps, double loss,
                   double img_per_s) {
  if (!bar_) return;
  const auto now = std::chrono::steady_clock::now();
  // Redraw at most 10 times a second: a terminal is slow next to a small model's step.
  if (step + 1 < steps && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  constexpr int kWidth = 30;
  const int done = steps > 0 ? static_cast<int>(kWidth * (step + 1) / steps) : kWidth;
  std::string bar(done, '#');
  bar.resize(kWidth, '.');
  std::fprintf(stdout, "\r\033[Kepoch %d [%s] %lld/%lld  loss %.4f  %.1f img/s", epoch, bar.c_str(),
               static_cast<long long>(step + 1), static_cast<long long>(steps), loss, img_per_s);
  std::fflush(stdout);
  bar_drawn_ = true;
}

void Metrics::epoch(const EpochReport& r) {
  if (!enabled_) return;
  clearBar();
  std::printf("%s\n", toLine(r).c_str());
  std::fflush(stdout);
  if (jsonl_ && (std::fprintf(jsonl_, "%s\n", toJson(r).c_str()) < 0 || std::fflush(jsonl_) != 0))
    throw std::runtime_error("--metrics file " + path_ + ": write failed: " + std::strerror(errno));
}

void Metrics::message(const std::string& line) {
  if (!enabled_) return;
  clearBar();
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

}  // namespace accord::resnet
