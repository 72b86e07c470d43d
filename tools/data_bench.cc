// accord-data-bench: images per second of the trainer's data pipeline alone (read,
// decode, augment, batch), with no model: what the loader can feed. tools/data_bench.py
// runs it beside PyTorch's DataLoader on the same files.
//
//   accord-data-bench --dataset packed --data-dir packed/train --data-workers 2
#include "cli_checks.h"
#include "jpeg_source.h"
#include "loader.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <stdexcept>

using namespace accord::resnet;

int main(int argc, char** argv) {
  CLI::App app{"accord-data-bench: decode + augment throughput of accord-resnet's loader"};
  std::string dataset = "folder", dir;
  int workers = 2, batch = 64, size = 224, epochs = 1, prefetch = 4;
  bool eval = false;
  app.add_option("--dataset", dataset, "folder or packed")
      ->check(CLI::IsMember({"folder", "packed"}))
      ->capture_default_str();
  app.add_option("--data-dir", dir, "one split: a class-subfolder folder or a packed folder")
      ->required()
      ->check(accord_tools::nonEmptyPath());
  app.add_option("--data-workers", workers, "decode threads")
      ->check(accord_tools::integerIn(1, 1024))
      ->capture_default_str();
  app.add_option("--batch-size", batch, "images per batch")
      ->check(accord_tools::integerIn(1, 65536))
      ->capture_default_str();
  app.add_option("--image-size", size, "output height = width")
      ->check(accord_tools::integerIn(1, 2048))
      ->capture_default_str();
  app.add_option("--epochs", epochs, "timed passes over the data, after one untimed pass")
      ->check(accord_tools::integerIn(1, 1000))
      ->capture_default_str();
  app.add_option("--prefetch", prefetch, "batches in flight")
      ->check(accord_tools::integerIn(1, 64))
      ->capture_default_str();
  app.add_flag("--eval", eval, "centre crop instead of random-resized crop and flip");
  CLI11_PARSE(app, argc, argv);
  try {
    auto src = dataset == "folder" ? makeJpegFolder(dir, size) : makePacked(dir, size);
    LoaderOptions lo;
    lo.batch = static_cast<int>(std::min<std::int64_t>(batch, src->size()));
    if (lo.batch < batch)
      std::fprintf(stderr,
                   "accord-data-bench: --batch-size %d is more than the %lld images in %s: "
                   "batches of %d\n",
                   batch, static_cast<long long>(src->size()), dir.c_str(), lo.batch);
    lo.workers = workers;
    lo.prefetch = prefetch;
    lo.train = !eval;
    // Each pass decodes all its own batches inside its timing. The trainer's loader
    // goes on into the next epoch's first `prefetch` batches while an epoch ends
    // (LoaderOptions::epochs): here those would be made during the pass before, untimed,
    // and an epoch of no more than `prefetch` batches would take no time at all.
    lo.epochs = 0;
    checkLoaderMemory(*src, lo, 1);
    Loader loader(*src, lo);
    // Batches are borrowed, as the trainer takes them: a copy of each on this one
    // thread would bound what many workers can show.
    float* x = nullptr;
    std::vector<std::int32_t> y(static_cast<std::size_t>(lo.batch));
    std::int64_t images = 0;
    double seconds = 0;
    // Pass 0 warms the page cache and the allocator; it is not timed.
    for (int e = 0; e <= epochs; ++e) {
      const auto t0 = std::chrono::steady_clock::now();
      loader.startEpoch(e);
      std::int64_t n = 0;
      for (int got; (got = loader.borrow(&x, y.data())) > 0;) n += got;
      if (e == 0) continue;
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      images += n;
    }
    std::printf("accord-data-bench: %s %lld images in %.2f s: %.1f images/s (%d workers)\n",
                dataset.c_str(), static_cast<long long>(images), seconds, images / seconds,
                workers);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "accord-data-bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
