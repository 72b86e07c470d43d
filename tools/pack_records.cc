// accord-pack: packs an image folder (one subfolder per class of .jpg/.jpeg files)
// into the trainer's packed record format (examples/resnet/records.h): a few large
// shard files and an index with each record's shard, offset, length, label and CRC-32.
//
//   accord-pack data/train packed/train --shards 8
//   accord-pack data/val packed/val
#include "cli_checks.h"
#include "progress.h"
#include "records.h"

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <vector>

using namespace accord::resnet;

int main(int argc, char** argv) {
  CLI::App app{
      "accord-pack: packs a folder of JPEGs (one subfolder per class) into shard files plus "
      "an index (file, offset, length, label, CRC-32), for accord-resnet --dataset packed.\n"
      "Records are shuffled (by --seed) so that any run of them holds every class."};
  std::string src, out;
  PackOptions opt;
  bool quiet = false;
  app.add_option("source", src, "folder with one subfolder per class")
      ->required()
      ->check(accord_tools::nonEmptyPath());
  app.add_option("output", out, "folder to write the shards and index.tsv into")
      ->required()
      ->check(accord_tools::nonEmptyPath());
  app.add_option("--shards", opt.shards,
                 "number of shard files (0: one per 256 MiB; use at least the number of ranks "
                 "so that each rank reads its own)")
      ->check(accord_tools::integerIn(0, 1 << 20))
      ->capture_default_str();
  app.add_option("--seed", opt.seed, "seed of the records' order")
      ->check(accord_tools::nonNegativeInteger())
      ->capture_default_str();
  std::string corrupt = "reject";
  app.add_option("--corrupt", corrupt,
                 "a file that is no JPEG the trainer can decode: reject (the pack fails, naming "
                 "them all) or skip (left out, each named)")
      ->check(CLI::IsMember({"reject", "skip"}))
      ->capture_default_str();
  app.add_flag("--quiet", quiet, "no progress on stderr");
  CLI11_PARSE(app, argc, argv);

  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  std::unique_ptr<accord_tools::Progress> progress;
  opt.progress = [&](std::int64_t, std::int64_t total) {
    if (!progress) progress = std::make_unique<accord_tools::Progress>("accord-pack", total, quiet);
    progress->advance();
  };
  opt.skip_bad = corrupt == "skip";
  std::int64_t skipped = 0;
  opt.skipped = [&](const std::string& why) {
    if (progress) progress->interrupt();
    std::fprintf(stderr, "accord-pack: left out %s\n", why.c_str());
    ++skipped;
  };
  opt.removed_stale = [&](const std::string& path) {
    std::fprintf(stderr, "accord-pack: removed %s, left by a pack that was killed\n", path.c_str());
  };
  try {
    const RecordIndex index = packFolder(src, out, opt);
    std::uint64_t bytes = 0;
    for (std::uint64_t b : index.shard_bytes) bytes += b;
    std::printf("accord-pack: %zu images of %zu classes, %.1f MiB in %zu shards -> %s (%.1f s)\n",
                index.records.size(), index.classes.size(), bytes / 1048576.0, index.shards.size(),
                out.c_str(), std::chrono::duration<double>(Clock::now() - t0).count());
    // A class folder with no image in it (or only files left out) stays a class, as
    // accord-resnet's folder reader keeps it: labels then agree with a split that has
    // images of it. Said, since a stray folder shifts every label after it.
    std::vector<std::int64_t> images_of(index.classes.size(), 0);
    for (const RecordEntry& e : index.records) ++images_of[static_cast<std::size_t>(e.label)];
    for (std::size_t k = 0; k < images_of.size(); ++k)
      if (images_of[k] == 0)
        std::fprintf(stderr,
                     "accord-pack: class %s (label %zu) has no images; kept as a class, as "
                     "accord-resnet --dataset folder keeps it\n",
                     index.classes[k].c_str(), k);
    if (skipped > 0)
      std::printf("accord-pack: %lld file(s) left out: no JPEG the trainer can decode\n",
                  static_cast<long long>(skipped));
  } catch (const std::exception& e) {
    if (progress) progress->interrupt();
    std::fprintf(stderr, "accord-pack: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
