// accord-fusion-probe: which of ResNet's fused patterns cuDNN has engines for on this GPU,
// and what they cost against the passes the trainer runs today, at ResNet-50's shapes.
//
//   accord-fusion-probe [--batch 256,128] [--dtype bf16,fp16] [--shapes short|all]
//                       [--engines 1] [--iters 5] [--budget 60]
//
// One table row per (precision, batch, shape, pattern): the engines cuDNN offers
// (heuristics mode A / fallback / every engine that accepts the graph), the best time
// of the first plans that finalize (--engines; an engine that compiles at run time may
// take seconds to build its plan, which the note then says), and the time of what the pattern replaces in
// the trainer (fusion_measure.cc says which). Where no engine takes a graph, cuDNN's
// reason. Rows come in order of importance and the probe stops starting rows once
// --budget seconds have passed, so a cut-short run still answers the main questions.
#include "bench/fusion_measure.h"

#include <CLI/CLI.hpp>

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

using namespace accord::resnet::probe;

namespace {

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// ResNet-50's bottleneck convolutions whose input is a batch norm's output with its
// ReLU (the 3x3 and the expanding 1x1 of each stage), where the patterns apply; "all"
// adds the strided 3x3 that opens stages 2-4.
std::vector<ConvShape> convShapes(bool all) {
  std::vector<ConvShape> shapes;
  for (int stage = 0; stage < 4; ++stage) {
    const int w = 64 << stage, H = 56 >> stage;
    shapes.push_back({w, w, H, 3, 1});
    shapes.push_back({w, 4 * w, H, 1, 1});
    if (all && stage > 0) shapes.push_back({w, w, 2 * H, 3, 2});
  }
  return shapes;
}

void printRow(const Row& r) {
  std::printf("%-4s %4d  %-20s %-27s %-18s %9s %9s %8s  %s\n", r.dtype.c_str(), r.batch,
              r.shape.c_str(), r.pattern.c_str(), r.engines.c_str(), msText(r.fused).c_str(),
              msText(r.unfused).c_str(), gainText(r).c_str(), r.note.c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::string batches = "256,128", dtypes = "bf16,fp16", shapes_set = "short";
  ProbeOptions opt;
  double budget = 60.0;
  CLI::App app{
      "accord-fusion-probe: asks cuDNN, on this GPU, for engines of ResNet's fused patterns "
      "(batch norm's apply and ReLU folded into the next convolution's input and its "
      "statistics into the output; the data gradient with the ReLU and batch-norm "
      "gradients; the weight gradient of a batch norm's output; the block's end: two batch "
      "norms, the residual add and the ReLU) at ResNet-50's shapes, times them, and times "
      "what each replaces in accord-resnet. Prints one row per shape and pattern."};
  app.add_option("--batch", batches, "batch sizes, comma-separated")->capture_default_str();
  app.add_option("--dtype", dtypes, "16-bit activation types: bf16, fp16, comma-separated")
      ->capture_default_str();
  app.add_option("--shapes", shapes_set,
                 "short: each stage's 3x3 and expanding 1x1; all: also the strided 3x3s")
      ->check(CLI::IsMember({"short", "all"}))
      ->capture_default_str();
  app.add_option("--engines", opt.engines,
                 "plans built and timed per graph, at most, in cuDNN's order of preference "
                 "(heuristics mode A, then fallback); each may compile its kernel first")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--iters", opt.iters, "timed runs per measurement (after one untimed)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_flag("--block-ends", opt.block_ends_only,
               "only the blocks' ends: the dual and single batch-norm-add-ReLU (cuDNN's and "
               "ours), our statistics pass, and our batch-norm backward against cuDNN's Ex "
               "call (seconds, where every pattern takes a minute)");
  app.add_option("--budget", budget,
                 "seconds after which no new row starts (those left are listed as not run)")
      ->check(CLI::Range(1.0, 3600.0))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  std::vector<int> ns;
  for (const std::string& b : split(batches)) {
    try {
      ns.push_back(std::stoi(b));
    } catch (const std::exception&) {
      std::fprintf(stderr, "accord-fusion-probe: --batch '%s' is not a number\n", b.c_str());
      return 2;
    }
    if (ns.back() < 1 || ns.back() > 4096) {
      std::fprintf(stderr, "accord-fusion-probe: --batch %d is outside [1, 4096]\n", ns.back());
      return 2;
    }
  }
  std::vector<std::string> types = split(dtypes);
  for (const std::string& t : types)
    if (t != "bf16" && t != "fp16") {
      std::fprintf(stderr, "accord-fusion-probe: --dtype '%s': expected bf16 or fp16\n", t.c_str());
      return 2;
    }
  int gpus = 0;
  const cudaError_t s = cudaGetDeviceCount(&gpus);
  if (s != cudaSuccess || gpus == 0) {
    std::fprintf(stderr, "accord-fusion-probe: no GPU that CUDA can use here (%s)\n",
                 s != cudaSuccess ? cudaGetErrorString(s) : "no device");
    return 2;
  }
  const std::vector<ConvShape> shapes = convShapes(shapes_set == "all");
  try {
    Probe probe(opt, ns, shapes);
    std::printf("%s\n%-4s %4s  %-20s %-27s %-18s %9s %9s %8s  %s\n", probe.describe().c_str(),
                "type", "N", "shape", "pattern", "engines A/fb/all", "fused ms", "today ms",
                "gain", "note");
    const auto start = std::chrono::steady_clock::now();
    int skipped = 0;
    for (const int N : ns) {
      for (const std::string& t : types) {
        for (const Unit& unit : probe.units(t, N)) {
          const double spent =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          if (spent > budget) {
            ++skipped;
            continue;
          }
          for (const Row& r : probe.run(unit)) printRow(r);
        }
      }
    }
    if (skipped)
      std::printf("-- %d units (shape x pattern group) not run: past the %.0f s budget\n", skipped,
                  budget);
    std::printf("%s", legend());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "accord-fusion-probe: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
