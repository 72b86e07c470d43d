// ACCORD_AUTOTUNE on a training-like loop: every step submits the same named gradients
// (small ones that fuse, one that is cut into pieces), so the tuner recognizes steps,
// tries its candidates and settles, changing the fusion threshold and the piece size
// between cycles on every rank alike. Every step's sums must be exact throughout, and
// rank 0's trial log must show the whole search. Started from a poor point (no fusion,
// 16 KiB pieces) with one measured step per trial, to keep the run short.
#include <catch2/catch.hpp>

#include "mpi_test.h"

#include <accord/accord.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::string logPath() { return "autotune_log_" + std::to_string(getppid()) + ".csv"; }

// A step to find the recurring name, two passes of 1 + 3 + 7 + 5 trials (autotune.cc's
// ladders and the start values) of one warm-up and one measured step each, and some
// settled steps after.
constexpr int kTrials = 2 * 16;
constexpr int kSteps = 1 + kTrials * 2 + 12;

}  // namespace

TEST_CASE("autotune searches and settles while every sum stays exact", "[autotune]") {
  const int n = accord::size();
  const int me = accord::rank();
  // Element counts: 12 small tensors (fused once fusion is on) and one of 3 MiB.
  std::vector<std::int64_t> counts;
  for (int t = 0; t < 12; ++t) counts.push_back(17 + 101 * t);
  counts.push_back(768 * 1024);
  std::vector<std::vector<float>> grads(counts.size());
  for (int step = 0; step < kSteps; ++step) {
    std::vector<accord::Handle> handles;
    for (std::size_t t = counts.size(); t-- > 0;) {  // backward order, as gradients come
      auto& g = grads[t];
      g.resize(static_cast<std::size_t>(counts[t]));
      for (std::size_t i = 0; i < g.size(); ++i)
        g[i] = static_cast<float>((me + 1) * (step % 5 + 1) + static_cast<int>(i % 7));
      accord::AllreduceOptions o;
      o.name = "grad." + std::to_string(t);
      o.op = accord::ReduceOp::Sum;
      handles.push_back(accord::allreduce_async(
          {g.data(), accord::DType::Float32, {counts[t]}, accord::Device::cpu()}, o));
    }
    for (auto& h : handles) REQUIRE(accord_test::finish(h, "autotune step").ok());
    int wrong = 0;
    for (std::size_t t = 0; t < counts.size(); ++t) {
      for (std::size_t i = 0; i < grads[t].size(); ++i) {
        const float want =
            static_cast<float>(n * (n + 1) / 2 * (step % 5 + 1) + n * static_cast<int>(i % 7));
        wrong += grads[t][i] != want;
      }
    }
    INFO("step " << step);
    REQUIRE(wrong == 0);
  }
  accord::barrier();
  if (me != 0) return;
  std::ifstream in(logPath());
  REQUIRE(in.good());
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::remove(logPath().c_str());
  REQUIRE(lines.size() == 1 + kTrials + 1);
  // Trial 1 ran the start; the first pass ran different settings in every trial; the
  // last line says where the search settled, among the settings tried.
  CHECK(lines[1].rfind("1,0,16384,0,", 0) == 0);
  std::set<std::string> settings;
  for (std::size_t i = 1; i + 1 < lines.size(); ++i) {
    std::stringstream fields(lines[i]);
    std::string trial, fusion, chunk, cycle;
    std::getline(fields, trial, ',');
    std::getline(fields, fusion, ',');
    std::getline(fields, chunk, ',');
    std::getline(fields, cycle, ',');
    CHECK(trial == std::to_string(i));
    settings.insert(fusion + "," + chunk + "," + cycle);
    if (i == kTrials / 2) CHECK(settings.size() == static_cast<std::size_t>(kTrials / 2));
  }
  REQUIRE(lines.back().rfind("settled,", 0) == 0);
  const std::string chosen = lines.back().substr(8);
  bool known = false;
  for (const auto& s : settings) known = known || chosen.rfind(s + ",", 0) == 0;
  CHECK(known);
}

int main(int argc, char** argv) {
  setenv("ACCORD_AUTOTUNE", "1", 1);
  setenv("ACCORD_AUTOTUNE_STEPS", "1", 1);
  setenv("ACCORD_AUTOTUNE_LOG", logPath().c_str(), 1);
  setenv("ACCORD_AUTOTUNE_START", "ACCORD_FUSION_THRESHOLD=0 ACCORD_CHUNK_BYTES=16K", 1);
  return accord_test::runMain(argc, argv);
}
