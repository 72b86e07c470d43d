// Checkpoints: a round trip restores every value; truncated, corrupted and
// other-model files are rejected with a message naming the file; a symlink planted at
// the temporary name redirects nothing; a signal during the write leaves no temporary
// file; a path that cannot be written is refused before any training, leaving nothing
// behind; a checkpoint resumes only with the global batch
// and training set it was written with; `compare` never calls a NaN equal.
#include "checkpoint.h"
#include "scratch_dir.h"

#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <numeric>

using namespace accord::resnet;
namespace fs = std::filesystem;

namespace {

struct Fixture {
  std::vector<float> a = std::vector<float>(1000), b = std::vector<float>(7);
  std::vector<TensorRef> refs() {
    return {{"conv1.weight", a.data(), a.size()}, {"fc.bias", b.data(), b.size()}};
  }
  Fixture() {
    std::iota(a.begin(), a.end(), 0.5f);
    std::iota(b.begin(), b.end(), -3.0f);
  }
};

fs::path tempPath(const std::string& name) {
  static const fs::path dir = accord_test::scratchDir("ckpt");
  return dir / name;
}

std::string readAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void writeAll(const fs::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary);
  out.write(s.data(), static_cast<std::streamsize>(s.size()));
}

std::string loadError(const fs::path& p, const std::string& desc, Fixture& f) {
  try {
    loadCheckpoint(p.string(), desc, f.refs());
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("checkpoint round trip restores tensors and state", "[checkpoint]") {
  Fixture saved;
  const fs::path p = tempPath("round.ckpt");
  saveCheckpoint(p.string(), "resnet18 test", {3, 17, 317, 8192, 1234}, saved.refs());
  CHECK_FALSE(fs::exists(p.string() + ".tmp." + std::to_string(::getpid())));
  Fixture loaded;
  std::fill(loaded.a.begin(), loaded.a.end(), 0.0f);
  std::fill(loaded.b.begin(), loaded.b.end(), 0.0f);
  TrainState s = loadCheckpoint(p.string(), "resnet18 test", loaded.refs());
  CHECK(s.epoch == 3);
  CHECK(s.step_in_epoch == 17);
  CHECK(s.global_step == 317);
  CHECK(s.loss_scale == 8192);
  CHECK(s.loss_scale_good_steps == 1234);
  CHECK(loaded.a == saved.a);
  CHECK(loaded.b == saved.b);
}

TEST_CASE("truncated, corrupt and foreign checkpoints are rejected", "[checkpoint]") {
  Fixture f;
  const fs::path p = tempPath("good.ckpt");
  saveCheckpoint(p.string(), "resnet18 test", {1, 0, 10}, f.refs());
  const std::string bytes = readAll(p);

  const fs::path cut = tempPath("cut.ckpt");
  for (std::size_t keep : {bytes.size() - 1, bytes.size() / 2, std::size_t{20}, std::size_t{3}}) {
    writeAll(cut, bytes.substr(0, keep));
    const std::string e = loadError(cut, "resnet18 test", f);
    CHECK(e.find("cut.ckpt") != std::string::npos);
    CHECK_FALSE(e.empty());
  }

  std::string flipped = bytes;
  flipped[bytes.size() / 2] ^= 0x10;
  const fs::path bad = tempPath("flip.ckpt");
  writeAll(bad, flipped);
  CHECK(loadError(bad, "resnet18 test", f).find("checksum") != std::string::npos);

  const std::string other = loadError(p, "resnet50 test", f);
  CHECK(other.find("different model") != std::string::npos);
  CHECK(other.find("resnet18 test") != std::string::npos);

  CHECK(loadError(tempPath("absent.ckpt"), "resnet18 test", f).find("absent.ckpt") !=
        std::string::npos);
  const fs::path folder = tempPath("folder.ckpt");
  fs::create_directories(folder);
  CHECK(loadError(folder, "resnet18 test", f) ==
        folder.string() + " is a directory, not a checkpoint file");

  std::vector<float> small(5);
  std::vector<TensorRef> wrong = {{"conv1.weight", small.data(), small.size()}, f.refs()[1]};
  CHECK_THROWS_WITH(loadCheckpoint(p.string(), "resnet18 test", wrong),
                    Catch::Contains("conv1.weight"));
}

// The temporary name is predictable (<path>.tmp.<pid>); a symlink planted there must
// not redirect the write, whether its target exists or not.
TEST_CASE("a symlink at the temporary name is neither followed nor replaced", "[checkpoint]") {
  Fixture saved;
  const fs::path p = tempPath("linked.ckpt");
  const fs::path tmp = p.string() + ".tmp." + std::to_string(::getpid());
  const fs::path victim = tempPath("victim.txt"), absent = tempPath("absent-target");
  for (const fs::path& target : {victim, absent}) {
    INFO("symlink to " << target);
    fs::remove(p);
    fs::remove(tmp);
    fs::remove(absent);
    writeAll(victim, "precious");
    fs::create_symlink(target, tmp);
    saveCheckpoint(p.string(), "resnet18 test", {2, 5, 50}, saved.refs());
    CHECK(readAll(victim) == "precious");
    CHECK_FALSE(fs::exists(absent));
    CHECK(fs::is_symlink(tmp));
    CHECK_FALSE(fs::is_symlink(p));
    Fixture loaded;
    std::fill(loaded.a.begin(), loaded.a.end(), 0.0f);
    CHECK(loadCheckpoint(p.string(), "resnet18 test", loaded.refs()).global_step == 50);
    CHECK(loaded.a == saved.a);
    int leftovers = 0;  // temporary files besides the planted link
    for (const auto& e : fs::directory_iterator(p.parent_path()))
      leftovers +=
          e.path().filename().string().rfind("linked.ckpt.tmp.", 0) == 0 && e.path() != tmp;
    CHECK(leftovers == 0);
  }
  fs::remove(tmp);
}

// Ctrl-C, or the SIGTERM mpirun sends, while the file is written: the temporary file
// goes, the process still ends by the signal, and the checkpoint there stays as it was.
TEST_CASE("a signal during the write leaves no temporary file behind", "[checkpoint]") {
  const fs::path p = tempPath("signalled.ckpt");
  Fixture first;
  saveCheckpoint(p.string(), "resnet18 test", {1, 0, 10}, first.refs());
  const std::string before = readAll(p);
  for (const int sig : {SIGINT, SIGTERM}) {
    INFO("signal " << sig);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      // As in accord-resnet: no handler of its own (the test framework has some).
      std::signal(SIGINT, SIG_DFL);
      std::signal(SIGTERM, SIG_DFL);
      std::vector<float> big(std::size_t{1} << 26, 1.0f);  // 256 MiB: a write that lasts
      saveCheckpoint(p.string(), "resnet18 test", {2, 0, 20}, {{"big", big.data(), big.size()}});
      ::_exit(0);
    }
    const fs::path tmp = p.string() + ".tmp." + std::to_string(child);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    // Once bytes are in it, the write has begun (and the file's guard is in place).
    const auto writing = [&] {
      std::error_code ec;
      return fs::file_size(tmp, ec) > 0 && !ec;
    };
    while (!writing() && std::chrono::steady_clock::now() < deadline) ::usleep(100);
    const bool was_writing = writing();
    ::kill(child, sig);
    int status = 0;
    ::waitpid(child, &status, 0);
    REQUIRE(was_writing);
    CHECK(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == sig);
    CHECK_FALSE(fs::exists(tmp));
    CHECK(readAll(p) == before);
  }
}

// What a run asks before training (checkWritable): a missing folder and a folder in
// the file's place are refused naming the path; a writable path passes, and the probe
// leaves no file behind, nor touches a checkpoint already there.
TEST_CASE("a checkpoint path is checked for writing before any training", "[checkpoint]") {
  const fs::path dir = accord_test::scratchDir("writable");
  auto refusal = [](const fs::path& p) {
    try {
      checkWritable(p.string());
    } catch (const CheckpointError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string missing = refusal(dir / "absent" / "run.ckpt");
  CHECK_THAT(missing, Catch::Contains((dir / "absent" / "run.ckpt").string()));
  CHECK_THAT(missing, Catch::Contains("No such file or directory"));
  CHECK_THAT(refusal(dir), Catch::Contains(dir.string() + " is a directory"));

  const fs::path p = dir / "run.ckpt";
  CHECK(refusal(p).empty());
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == 0);
  Fixture saved;
  saveCheckpoint(p.string(), "resnet18 test", {1, 0, 9}, saved.refs());
  const std::string before = readAll(p);
  CHECK(refusal(p).empty());
  CHECK(readAll(p) == before);
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == 1);
}

namespace {

std::string resumeError(const fs::path& p, Fixture& f, const StepGeometry& run) {
  try {
    loadCheckpoint(p.string(), "resnet18 test", f.refs(), run);
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a checkpoint resumes only with its global batch and training set", "[checkpoint]") {
  Fixture f;
  const fs::path p = tempPath("geometry.ckpt");
  saveCheckpoint(p.string(), "resnet18 test", {0, 12, 12}, f.refs(), {16, 2, 512});
  const CheckpointContents c = readCheckpoint(p.string());
  CHECK(c.geometry.batch_size == 16);
  CHECK(c.geometry.ranks == 2);
  CHECK(c.geometry.train_size == 512);

  const std::string larger = resumeError(p, f, {32, 2, 512});
  CHECK(larger.find("geometry.ckpt: written at global batch 32 (--batch-size 16 x 2 ranks), "
                    "this run has global batch 64 (--batch-size 32 x 2 ranks)") !=
        std::string::npos);
  CHECK(resumeError(p, f, {16, 2, 256}).find("training set of 512 samples, this run has 256") !=
        std::string::npos);
  CHECK(resumeError(p, f, {32, 1, 512}).empty());  // the same samples per step
  CHECK(resumeError(p, f, {}).empty());            // no geometry to compare
}

// Files written before the geometry was recorded: the same bytes without it.
// A file of this build's version rewritten as an older `version`: the fields that
// version lacks cut out, the CRC made again.
fs::path asVersion(const fs::path& current, std::uint32_t version, const std::string& name) {
  std::string bytes = readAll(current);
  const std::size_t geometry_at = 8 + 4 + 4 + std::strlen("resnet18 test") + 3 * 8;
  const std::size_t loss_scale_at = geometry_at + 3 * 8;
  bytes.erase(loss_scale_at, 8 + 8);  // versions 1 and 2: no loss scale
  if (version < 2) bytes.erase(geometry_at, 3 * 8);
  std::memcpy(&bytes[8], &version, 4);
  bytes.resize(bytes.size() - 4);
  const auto crc = static_cast<std::uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(bytes.size())));
  bytes.append(reinterpret_cast<const char*>(&crc), 4);
  const fs::path old = tempPath(name);
  writeAll(old, bytes);
  return old;
}

TEST_CASE("version 1 and 2 checkpoints still load", "[checkpoint]") {
  Fixture saved;
  const fs::path p = tempPath("v3.ckpt");
  saveCheckpoint(p.string(), "resnet18 test", {1, 2, 18, 512, 7}, saved.refs(), {16, 2, 512});
  const fs::path v1 = asVersion(p, 1, "v1.ckpt"), v2 = asVersion(p, 2, "v2.ckpt");
  Fixture loaded;
  std::fill(loaded.a.begin(), loaded.a.end(), 0.0f);
  TrainState s = loadCheckpoint(v1.string(), "resnet18 test", loaded.refs(), {64, 4, 60000});
  CHECK(s.global_step == 18);
  CHECK(s.loss_scale == 0);
  CHECK(loaded.a == saved.a);
  CHECK(readCheckpoint(v1.string()).geometry.batch_size == 0);

  std::fill(loaded.a.begin(), loaded.a.end(), 0.0f);
  CHECK_THROWS_AS(loadCheckpoint(v2.string(), "resnet18 test", loaded.refs(), {64, 4, 60000}),
                  CheckpointError);  // version 2 has the geometry
  s = loadCheckpoint(v2.string(), "resnet18 test", loaded.refs(), {32, 1, 512});
  CHECK(s.global_step == 18);
  CHECK(s.loss_scale == 0);
  CHECK(s.loss_scale_good_steps == 0);
  CHECK(loaded.a == saved.a);
  CHECK(readCheckpoint(v2.string()).geometry.batch_size == 16);
}

// The equivalence and skip tests rely on compare: a NaN or inf must not slip through as
// equal (every comparison with NaN is false, so a naive "excess > worst" never sees it).
TEST_CASE("compare passes values within tolerance and never a NaN", "[checkpoint]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  CheckpointContents a;
  a.names = {"w", "b"};
  a.values = {{1, 2, 3}, {0.5f}};
  CheckpointContents b = a;
  CHECK(compareTensors(a, b, 0, 0).equal);
  b.values[0][1] = 2.001f;
  const TensorDiff close = compareTensors(a, b, 0, 1e-4);
  CHECK_FALSE(close.equal);
  CHECK(close.tightest == "w");
  CHECK(compareTensors(a, b, 0, 1e-3).equal);

  b = a;
  b.values[1][0] = nan;
  const TensorDiff one_nan = compareTensors(a, b, 1, 1);
  CHECK_FALSE(one_nan.equal);
  CHECK(one_nan.tightest == "b");
  CHECK(std::isinf(one_nan.max_abs));
  a.values[1][0] = nan;
  CHECK_FALSE(compareTensors(a, b, 1, 1).equal);  // NaN on both sides
  a.values[1][0] = b.values[1][0] = std::numeric_limits<float>::infinity();
  CHECK_FALSE(compareTensors(a, b, 1, 1).equal);

  b = a;
  b.names[1] = "c";
  CHECK_FALSE(compareTensors(a, b, 0, 0).same_tensors);
  CHECK(compareTensors(a, b, 0, 0).mismatch ==
        "tensor 1 is 'b' (1 values) in the first, 'c' (1 values) in the second");
  b = a;
  b.values[0].push_back(4);
  CHECK_FALSE(compareTensors(a, b, 0, 0).same_tensors);
  CHECK(compareTensors(a, b, 0, 0).mismatch ==
        "tensor 0 is 'w' (3 values) in the first, 'w' (4 values) in the second");
  b = a;
  b.names.pop_back();
  b.values.pop_back();
  CHECK_FALSE(compareTensors(a, b, 0, 0).same_tensors);
  CHECK(compareTensors(a, b, 0, 0).mismatch == "2 tensors in the first, 1 in the second");
}
