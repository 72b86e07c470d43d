// accord-make-jpegs: writes an ImageNet-style JPEG dataset for the tests and the data
// benchmark, made here instead of downloaded: Fashion-MNIST's 28x28 images (the Debian
// package) scaled up to photo sizes, tinted and grained, or synthetic class patterns.
//
//   accord-make-jpegs out --train 1000 --val 200     -> out/train/<class>/*.jpg, out/val/...
//
// Sizes are drawn per image in [--min-size, --max-size] for width and height apart,
// so crops and scaled decoding meet varied shapes. Everything follows from --seed.
#include "cli_checks.h"
#include "data.h"
#include "idx.h"
#include "jpeg.h"
#include "progress.h"

#include <signal.h>
#include <tbb/parallel_for.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

using namespace accord::resnet;
namespace fs = std::filesystem;

namespace {

const char* const kFashionClasses[] = {"t-shirt", "trouser", "pullover", "dress", "coat",
                                       "sandal",  "shirt",   "sneaker",  "bag",   "ankle-boot"};

struct Options {
  std::string out, source = "fashion-mnist", fashion_dir = kFashionMnistDir;
  int train = 1000, val = 200, classes = 10, min_size = 256, max_size = 500, quality = 90;
  std::uint64_t seed = 1;
};

// Grey value (0-255) of the source image at (u, v) in [0, 1)^2.
using Pattern = std::function<float(double u, double v)>;

RgbImage render(const Pattern& grey, int w, int h, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> tint(0.35f, 1.0f);
  std::normal_distribution<float> grain(0.0f, 6.0f);
  const float colour[3] = {tint(rng), tint(rng), tint(rng)};
  const float back[3] = {tint(rng) * 60, tint(rng) * 60, tint(rng) * 60};
  RgbImage img{w, h, std::vector<std::uint8_t>(static_cast<std::size_t>(w) * h * 3)};
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      const float g = grey((x + 0.5) / w, (y + 0.5) / h) / 255.0f;
      for (int c = 0; c < 3; ++c) {
        const float v = back[c] * (1 - g) + 255.0f * colour[c] * g + grain(rng);
        img.pixels[(static_cast<std::size_t>(y) * w + x) * 3 + c] =
            static_cast<std::uint8_t>(std::clamp(v, 0.0f, 255.0f));
      }
    }
  return img;
}

// Bilinear lookup in a w x h grey image, of the size its IDX file gives.
Pattern fashion(const std::uint8_t* px, int w, int h) {
  return [=](double u, double v) {
    const double x = std::clamp(u * w - 0.5, 0.0, w - 1.0);
    const double y = std::clamp(v * h - 0.5, 0.0, h - 1.0);
    const int x0 = static_cast<int>(x), y0 = static_cast<int>(y);
    const int x1 = std::min(x0 + 1, w - 1), y1 = std::min(y0 + 1, h - 1);
    const double fx = x - x0, fy = y - y0;
    const double top = px[y0 * w + x0] * (1 - fx) + px[y0 * w + x1] * fx;
    const double bottom = px[y1 * w + x0] * (1 - fx) + px[y1 * w + x1] * fx;
    return static_cast<float>(top * (1 - fy) + bottom * fy);
  };
}

// Class k: stripes at angle k * pi / classes, with a random phase and frequency.
Pattern stripes(int label, int classes, std::mt19937_64& rng) {
  const double angle = M_PI * label / classes;
  const double freq = 4 + static_cast<double>(rng() % 8), phase = (rng() % 1000) / 1000.0;
  return [=](double u, double v) {
    const double t = u * std::cos(angle) + v * std::sin(angle);
    return static_cast<float>(127.5 * (1 + std::sin(2 * M_PI * (freq * t + phase))));
  };
}

void writeFile(const fs::path& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) throw DataError(path.string() + ": write failed: " + std::strerror(errno));
}

// Images mixed into a folder that already holds some would be counted as ours.
// An empty name passes fs::exists("") as a new folder, and the clean-up after a failure
// would then remove ./train and ./val.
void checkOutputFolder(const std::string& out) {
  if (out.empty()) throw DataError("the output folder's name is empty");
  std::error_code ec;
  if (!fs::exists(out, ec)) return;
  if (!fs::is_directory(out, ec)) throw DataError(out + ": exists and is not a folder");
  const bool empty = fs::is_empty(out, ec);
  if (ec) throw DataError(out + ": " + ec.message());
  if (!empty)
    throw DataError(out + ": folder is not empty; name a new or empty one (or remove it first)");
}

// After a failure: the images are of no use, and a second try needs an empty folder.
void removeOutput(const std::string& out, bool created) {
  std::error_code ignored;  // the failure being reported is the one that matters
  for (const char* split : {"train", "val"}) fs::remove_all(fs::path(out) / split, ignored);
  if (created) fs::remove(out, ignored);
}

// Ctrl-C (or a SIGTERM, SIGHUP) part way would leave a partial folder that a rerun
// refuses as not empty. The handler only notes the signal: the workers stop at their
// next image, main removes what this run wrote (as after any failure) and then ends
// the process with the same signal. Only where a signal's action is the default one;
// SA_RESETHAND lets a second Ctrl-C end it at once.
std::atomic<int> g_stop_signal{0};  // lock-free: safe to set in a handler

extern "C" void noteStopSignal(int sig) { g_stop_signal.store(sig); }

void stopOnSignals() {
  struct sigaction action {};
  action.sa_handler = noteStopSignal;
  action.sa_flags = SA_RESETHAND;
  sigemptyset(&action.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_DFL)
      ::sigaction(sig, &action, nullptr);
  }
}

void throwIfStopped() {
  if (const int sig = g_stop_signal.load())
    throw DataError(std::string("stopped by ") + strsignal(sig));
}

std::string className(const ImageSet* set, int label) {
  return set ? kFashionClasses[label] : "class-" + std::to_string(label);
}

// The classes that count images of a split get: image i is the source's image
// i mod n (Fashion-MNIST), or of class i mod --classes (synthetic).
std::vector<char> usedClasses(const Options& o, int count, const ImageSet* set) {
  std::vector<char> used(set ? 10 : o.classes, 0);
  for (int i = 0; i < count; ++i) used[set ? set->labels[i % set->n] : i % o.classes] = 1;
  return used;
}

// The trainer evaluates only on a val/ with train/'s class folders (labels are the
// sorted folder names): a set whose splits have different ones is of no use to it.
void checkSameClasses(const Options& o, const ImageSet* train_set, const ImageSet* test_set) {
  if (o.val == 0) return;
  const std::vector<char> train = usedClasses(o, o.train, train_set);
  const std::vector<char> val = usedClasses(o, o.val, test_set);
  if (train == val) return;
  constexpr int kNamed = 3;  // of the classes in one split only
  std::string differ;
  int count = 0;
  for (std::size_t k = 0; k < train.size(); ++k)
    if (train[k] != val[k] && ++count <= kNamed)
      differ += (differ.empty() ? "" : ", ") + className(train_set, static_cast<int>(k)) +
                (train[k] ? " in train/ only" : " in val/ only");
  if (count > kNamed) differ += " and " + std::to_string(count - kNamed) + " more";
  const auto classes = [](const std::vector<char>& used) {
    return std::to_string(std::count(used.begin(), used.end(), 1));
  };
  throw DataError("--train " + std::to_string(o.train) + " and --val " + std::to_string(o.val) +
                  " give train/ " + classes(train) + " classes and val/ " + classes(val) + " (" +
                  differ +
                  "); the trainer evaluates only on a val/ with train/'s classes: raise "
                  "--train and --val until each has every class, or pass --val 0");
}

void makeSplit(const Options& o, const std::string& split, int count, const ImageSet* set,
               accord_tools::Progress& progress) {
  // Only the classes that get an image: an empty class folder is an error to some
  // readers (torchvision's ImageFolder).
  const std::vector<char> used = usedClasses(o, count, set);
  for (std::size_t k = 0; k < used.size(); ++k)
    if (used[k])
      fs::create_directories(fs::path(o.out) / split / className(set, static_cast<int>(k)));
  const std::uint64_t split_seed = mixSeed(o.seed, split == "train" ? 1 : 2);
  tbb::parallel_for(0, count, [&](int i) {
    throwIfStopped();
    std::mt19937_64 rng(mixSeed(split_seed, static_cast<std::uint64_t>(i)));
    const int span = o.max_size - o.min_size + 1;
    const int w = o.min_size + static_cast<int>(rng() % span);
    const int h = o.min_size + static_cast<int>(rng() % span);
    int label;
    Pattern p;
    if (set) {
      // Fashion-MNIST's own split: training images for train/, test images for val/.
      const int j = i % set->n;
      label = set->labels[j];
      const std::size_t image_bytes = static_cast<std::size_t>(set->H) * set->W;
      p = fashion(set->pixels.data() + j * image_bytes, set->W, set->H);
    } else {
      label = i % o.classes;
      p = stripes(label, o.classes, rng);
    }
    const std::vector<std::uint8_t> bytes = encodeJpeg(render(p, w, h, rng), o.quality);
    char name[32];
    std::snprintf(name, sizeof(name), "%06d.jpg", i);
    const fs::path path = fs::path(o.out) / split / className(set, label) / name;
    writeFile(path, bytes);
    progress.advance();
  });
}

// The output folder is new or empty; everything written into it is this run's.
void makeSet(const Options& o, accord_tools::Progress& progress) {
  ImageSet train_set, test_set;
  const bool fashion = o.source == "fashion-mnist";
  if (fashion) {
    train_set = loadFashionMnist(o.fashion_dir, true, "--fashion-dir");
    if (o.val > 0) test_set = loadFashionMnist(o.fashion_dir, false, "--fashion-dir");
  }
  checkSameClasses(o, fashion ? &train_set : nullptr, fashion ? &test_set : nullptr);
  throwIfStopped();
  makeSplit(o, "train", o.train, fashion ? &train_set : nullptr, progress);
  if (o.val > 0) makeSplit(o, "val", o.val, fashion ? &test_set : nullptr, progress);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "accord-make-jpegs: writes a JPEG image folder (train/ and val/, one subfolder "
      "per class) for tests and benchmarks, from Fashion-MNIST or synthetic patterns"};
  Options o;
  app.add_option("output", o.out, "folder to create")
      ->required()
      ->check(accord_tools::nonEmptyPath());
  app.add_option("--source", o.source, "fashion-mnist (scaled up and tinted) or synthetic")
      ->check(CLI::IsMember({"fashion-mnist", "synthetic"}))
      ->capture_default_str();
  app.add_option("--fashion-dir", o.fashion_dir, "Fashion-MNIST folder")
      ->check(accord_tools::nonEmptyPath())
      ->capture_default_str();
  app.add_option("--train", o.train, "training images")
      ->check(accord_tools::integerIn(1, 10000000))
      ->capture_default_str();
  app.add_option("--val", o.val, "validation images (0: no val/)")
      ->check(accord_tools::integerIn(0, 10000000))
      ->capture_default_str();
  app.add_option("--classes", o.classes, "synthetic classes")
      ->check(accord_tools::integerIn(1, 1000))
      ->capture_default_str();
  app.add_option("--min-size", o.min_size, "smallest width or height")
      ->check(accord_tools::integerIn(8, 4096))
      ->capture_default_str();
  app.add_option("--max-size", o.max_size, "largest width or height")
      ->check(accord_tools::integerIn(8, 4096))
      ->capture_default_str();
  app.add_option("--quality", o.quality, "JPEG quality")
      ->check(accord_tools::integerIn(1, 100))
      ->capture_default_str();
  app.add_option("--seed", o.seed, "seed of sizes, tints and grain")
      ->check(accord_tools::nonNegativeInteger())
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (o.max_size < o.min_size) {
    std::fprintf(stderr, "accord-make-jpegs: error: --max-size %d is below --min-size %d\n",
                 o.max_size, o.min_size);
    return 2;
  }
  // Every class asked for gets a training image, or the set would have fewer classes
  // than --classes says; and val/ needs them all too (checkSameClasses says why).
  if (o.source == "synthetic" && o.train < o.classes) {
    std::fprintf(stderr,
                 "accord-make-jpegs: error: --train %d gives a training image to only %d of the "
                 "--classes %d: every class needs one (raise --train to %d or lower --classes)\n",
                 o.train, o.train, o.classes, o.classes);
    return 2;
  }
  if (o.source == "synthetic" && o.val > 0 && o.val < o.classes) {
    std::fprintf(stderr,
                 "accord-make-jpegs: error: --val %d gives a validation image to only %d of the "
                 "--classes %d, and the trainer evaluates only on a val/ with train/'s classes "
                 "(raise --val to %d, or pass --val 0)\n",
                 o.val, o.val, o.classes, o.classes);
    return 2;
  }
  accord_tools::Progress progress("accord-make-jpegs", o.train + o.val);
  bool checked = false, created = false;  // the output folder was empty, or made here
  try {
    checkOutputFolder(o.out);
    checked = true;
    created = !fs::exists(o.out);
    stopOnSignals();
    makeSet(o, progress);
    std::printf("accord-make-jpegs: %d training and %d validation images in %s\n", o.train, o.val,
                o.out.c_str());
  } catch (const std::exception& e) {
    progress.interrupt();
    const int sig = g_stop_signal.load();
    if (sig == 0) std::fprintf(stderr, "accord-make-jpegs: error: %s\n", e.what());
    if (checked) removeOutput(o.out, created);
    if (sig != 0) {
      std::fprintf(stderr, "accord-make-jpegs: %s: removed the images written\n", strsignal(sig));
      std::signal(sig, SIG_DFL);  // SA_RESETHAND did so already; the signal ends us now
      std::raise(sig);
    }
    return 1;
  }
  return 0;
}
