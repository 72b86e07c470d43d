// Metrics: the JSON line carries the reference study's quantities, top-5 only where
// there are more than 5 classes, and null where a value is not a number.
#include "metrics.h"

#include "scratch_dir.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

using namespace accord::resnet;

TEST_CASE("epoch reports as JSON lines and text", "[metrics]") {
  EpochReport r;
  r.epoch = 3;
  r.steps = 100;
  r.lr = 0.05;
  r.train_loss = 0.5;
  r.train_acc = 0.8;
  r.has_val = true;
  r.val_top1 = 0.875;
  r.val_top5 = 0.99;
  r.images_per_sec = 1000;
  r.images_per_sec_rank = 500;
  r.compute_s = 9;
  r.comm_wait_s = 1;
  r.data_wait_s = 0.5;
  r.world = 2;
  std::string json = toJson(r);
  CHECK(json.front() == '{');
  CHECK(json.back() == '}');
  CHECK(json.find('\n') == std::string::npos);
  for (const char* key :
       {"\"epoch\":3", "\"lr\":", "\"train_loss\":", "\"train_acc\":", "\"val_top1\":0.875",
        "\"images_per_sec\":1000.00", "\"images_per_sec_per_rank\":500.00", "\"compute_s\":9.000",
        "\"comm_wait_s\":1.000", "\"data_wait_s\":0.500", "\"ranks\":2"})
    CHECK(json.find(key) != std::string::npos);
  CHECK(json.find("val_top5") == std::string::npos);  // has_top5 is false
  r.has_top5 = true;
  CHECK(toJson(r).find("\"val_top5\":0.99") != std::string::npos);
  const std::string line = toLine(r);
  CHECK(line.find("test top-1 87.50%") != std::string::npos);
  CHECK(line.find("top-5 99.00%") != std::string::npos);
  CHECK(line.find("comm wait 1.0s") != std::string::npos);
  CHECK(line.find("skipped") == std::string::npos);
  CHECK(json.find("\"skipped_steps\":0") != std::string::npos);
  r.skipped_steps = 4;
  CHECK(toJson(r).find("\"skipped_steps\":4") != std::string::npos);
  CHECK(toLine(r).find("(4 non-finite steps skipped)") != std::string::npos);
}

// accord-report groups runs by these fields and refuses to compare runs whose model,
// data or device differ, so they must be in every line, quoted as JSON strings.
TEST_CASE("epoch reports say what the run was", "[metrics]") {
  EpochReport r;
  r.world = 2;
  r.images = 6400;
  r.run = {
      "resnet18 classes=10 in=1 stem=cifar width=0.125", "fashion-mnist", 28, "cpu", "cosine", 32};
  const std::string json = toJson(r);
  for (const char* key :
       {"\"images\":6400,", "\"batch_size\":32,", "\"global_batch\":64,", "\"schedule\":\"cosine\"",
        "\"model\":\"resnet18 classes=10 in=1 stem=cifar width=0.125\"",
        "\"dataset\":\"fashion-mnist\"", "\"image_size\":28,", "\"device\":\"cpu\"",
        "\"ranks\":2,"}) {
    INFO(json);
    CHECK(json.find(key) != std::string::npos);
  }
  r.run.model = "a \"quoted\" \\ name\n";
  CHECK(toJson(r).find("\"model\":\"a \\\"quoted\\\" \\\\ name\\u000a\"") != std::string::npos);
}

// A diverged run's NaN loss must leave the line valid JSON, which has no NaN or inf.
TEST_CASE("non-finite values are written as JSON null", "[metrics]") {
  EpochReport r;
  r.lr = std::numeric_limits<double>::infinity();
  r.train_loss = std::numeric_limits<double>::quiet_NaN();
  r.train_acc = -std::numeric_limits<double>::quiet_NaN();
  r.has_val = true;
  r.has_top5 = true;
  r.val_loss = -std::numeric_limits<double>::infinity();
  r.val_top1 = 0.5;
  std::string json = toJson(r);
  for (const char* key : {"\"lr\":null", "\"train_loss\":null", "\"train_acc\":null",
                          "\"val_loss\":null", "\"val_top1\":0.500000"}) {
    INFO(json);
    CHECK(json.find(key) != std::string::npos);
  }
  std::transform(json.begin(), json.end(), json.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  CHECK(json.find("nan") == std::string::npos);
  CHECK(json.find("inf") == std::string::npos);
}

namespace {

// Sets or unsets environment variables for one scope.
class EnvScope {
 public:
  void set(const char* name, const char* value) {
    const char* old = std::getenv(name);
    saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~EnvScope() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->second)
        ::setenv(it->first.c_str(), it->second->c_str(), 1);
      else
        ::unsetenv(it->first.c_str());
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

}  // namespace

TEST_CASE("progress bar: ACCORD_PROGRESS decides, and a launcher's pseudo-terminal does not") {
  EnvScope env;
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_PROCID"})
    env.set(v, nullptr);
  env.set("ACCORD_PROGRESS", "1");
  CHECK(progressBarWanted());
  env.set("ACCORD_PROGRESS", "0");
  CHECK_FALSE(progressBarWanted());
  env.set("ACCORD_PROGRESS", "yes");
  CHECK_THROWS_WITH(progressBarWanted(),
                    Catch::Contains("ACCORD_PROGRESS='yes'") && Catch::Contains("expected 0"));
  env.set("ACCORD_PROGRESS", nullptr);
  env.set("OMPI_COMM_WORLD_SIZE", "2");  // under mpirun: no bar, terminal or not
  CHECK_FALSE(progressBarWanted());
  env.set("OMPI_COMM_WORLD_SIZE", nullptr);
  CHECK(progressBarWanted() == static_cast<bool>(::isatty(STDOUT_FILENO)));
}

namespace {
std::vector<std::string> linesOf(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}
}  // namespace

TEST_CASE("a resumed run keeps the metrics of the epochs it does not train again", "[metrics]") {
  const std::string path = (accord_test::scratchDir("metrics_resume") / "run.jsonl").string();
  {
    Metrics first(true, path, false, false);
    for (int e = 1; e <= 3; ++e) {
      EpochReport r;
      r.epoch = e;
      first.epoch(r);
    }
  }
  REQUIRE(linesOf(path).size() == 3);
  // The checkpoint holds 2 whole epochs: epoch 3's line goes, the run writes it again.
  Metrics resumed(true, path, false, true);
  CHECK(linesOf(path).size() == 3);  // untouched until resumed() knows the epoch
  CHECK(resumed.resumed(2) == 2);
  EpochReport r;
  r.epoch = 3;
  r.steps = 7;
  resumed.epoch(r);
  const std::vector<std::string> lines = linesOf(path);
  REQUIRE(lines.size() == 3);
  CHECK(lines[0].rfind("{\"epoch\":1,", 0) == 0);
  CHECK(lines[1].rfind("{\"epoch\":2,", 0) == 0);
  CHECK(lines[2].rfind("{\"epoch\":3,\"steps\":7,", 0) == 0);
  // Resumed before any file was written: an empty one, and nothing kept.
  const std::string fresh = (accord_test::scratchDir("metrics_fresh") / "new.jsonl").string();
  Metrics none(true, fresh, false, true);
  CHECK(none.resumed(5) == 0);
  CHECK(linesOf(fresh).empty());
}

TEST_CASE("a metrics line that cannot be written is an error naming the file", "[metrics]") {
  Metrics full(true, "/dev/full", false, false);
  EpochReport r;
  r.epoch = 1;
  CHECK_THROWS_WITH(full.epoch(r),
                    Catch::Contains("/dev/full") && Catch::Contains("No space left on device"));
}
