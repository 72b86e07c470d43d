// Command-line flags: every numeric flag refuses values that make no sense (negative
// counts, NaN and infinite rates) with a message naming the flag, the value and the
// accepted range, and accepts its documented special values (0: automatic).
#include "options.h"

#include <CLI/CLI.hpp>
#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace accord::resnet;

namespace {

// The error parsing `args` gives, "" if it parses.
std::string parseError(const std::string& args, TrainOptions* out = nullptr) {
  CLI::App app;
  TrainOptions o;
  addTrainOptions(app, o);
  CompareOptions c;
  addCompareCommand(app, c);
  try {
    app.parse(args, false);
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  if (out) *out = o;
  return "";
}

}  // namespace

TEST_CASE("numeric flags out of range are refused naming flag, value and range", "[options]") {
  struct Case {
    const char* args;
    const char* expect;  // the whole message after the flag's name
  };
  const Case cases[] = {
      {"--threads -5", "--threads: -5 is not an integer in [0, 1024]"},
      {"--prefetch -1", "--prefetch: -1 is not an integer in [1, 64]"},
      {"--prefetch 0", "--prefetch: 0 is not an integer in [1, 64]"},
      {"--classes -1", "--classes: -1 is not an integer in [0, 100000]"},
      {"--image-size -1", "--image-size: -1 is not an integer in [0, 2048]"},
      {"--channels -3", "--channels: -3 is not an integer in [0, 256]"},
      {"--steps -1", "--steps: -1 is not an integer in [0, inf)"},
      {"--epochs 0", "--epochs: 0 is not an integer in [1, 100000]"},
      {"--epochs -3", "--epochs: -3 is not an integer in [1, 100000]"},
      {"--batch-size 0", "--batch-size: 0 is not an integer in [1, 65536]"},
      {"--train-limit -1", "--train-limit: -1 is not an integer in [0, inf)"},
      {"--synthetic-size 0", "--synthetic-size: 0 is not an integer in [1, 100000000]"},
      {"--checkpoint-every -1", "--checkpoint-every: -1 is not an integer in [0, inf)"},
      {"--pad-input 9", "--pad-input: 9 is not an integer in [0, 8]"},
      {"--pad-input -1", "--pad-input: -1 is not an integer in [0, 8]"},
      {"--lr nan", "--lr: nan is not a finite number in [0, inf)"},
      {"--lr inf", "--lr: inf is not a finite number in [0, inf)"},
      {"--lr -0.1", "--lr: -0.1 is not a finite number in [0, inf)"},
      {"--momentum nan", "--momentum: nan is not a finite number in [0, 1)"},
      {"--momentum inf", "--momentum: inf is not a finite number in [0, 1)"},
      {"--momentum 1", "--momentum: 1 is not a finite number in [0, 1)"},
      {"--width 0", "--width: 0 is not a finite number in (0, 16]"},
      {"--width nan", "--width: nan is not a finite number in (0, 16]"},
      {"--warmup-epochs -1", "--warmup-epochs: -1 is not a finite number in [0, inf)"},
      {"--milestones 30,nan", "--milestones: nan is not a finite number in [0, inf)"},
      {"--seed -1", "--seed: -1 is not an integer in [0, inf)"},
      {"--seed 18446744073709551616", "--seed: 18446744073709551616 is not an integer in [0, inf)"},
      {"--checkpoint --no-eval",
       "--checkpoint: '--no-eval' looks like a flag, not a path (for a file of that name: "
       "./--no-eval)"},
      {"--steps 99999999999999999999",
       "--steps: 99999999999999999999 is not an integer in [0, inf)"},
      {"--data-dir -x",
       "--data-dir: '-x' looks like a flag, not a path (for a file of that name: ./-x)"},
      {"--gamma 0", "--gamma: 0 is not a finite number in (0, 1]"},
      {"--min-lr -1", "--min-lr: -1 is not a finite number in [0, inf)"},
      {"--weight-decay inf", "--weight-decay: inf is not a finite number in [0, inf)"},
      {"--label-smoothing 1", "--label-smoothing: 1 is not a finite number in [0, 1)"},
      {"compare a b --atol nan", "--atol: nan is not a finite number in [0, inf)"},
      {"compare a b --rtol -1", "--rtol: -1 is not a finite number in [0, inf)"},
  };
  for (const Case& c : cases) {
    INFO(c.args);
    CHECK(parseError(c.args) == c.expect);
  }
}

TEST_CASE("in-range values and the documented special values parse", "[options]") {
  TrainOptions o;
  REQUIRE(parseError("", &o).empty());
  CHECK(o.threads == 0);
  CHECK(o.warmup_epochs < 0);  // the automatic warm-up stays reachable
  const char* good[] = {
      "--threads 0",     "--threads 4",          "--prefetch 1",
      "--classes 0",     "--image-size 0",       "--image-size 32",
      "--steps 0",       "--epochs 1",           "--lr 0",
      "--lr 1e30",       "--momentum 0",         "--momentum 0.99",
      "--width 0.125",   "--warmup-epochs 0",    "--milestones 1,2",
      "--gamma 1",       "--label-smoothing 0",  "--checkpoint-every 0",
      "--train-limit 0", "compare a b --atol 0",
  };
  for (const char* args : good) {
    INFO(args);
    CHECK(parseError(args).empty());
  }
  CHECK_FALSE(o.skip_nonfinite_steps);
  REQUIRE(parseError("--lr 0.5 --milestones 3,7 --threads 2 --skip-nonfinite-steps", &o).empty());
  CHECK(o.skip_nonfinite_steps);
  CHECK(o.lr == 0.5);
  CHECK(o.milestones == std::vector<double>{3, 7});
  CHECK(o.threads == 2);
}

TEST_CASE("the stem: auto picks by image size, explicit values are kept") {
  TrainOptions o;
  REQUIRE(parseError("", &o).empty());
  CHECK(o.stem == "auto");
  CHECK(cifarStem("auto", 28));
  CHECK(cifarStem("auto", kCifarStemLargest));
  CHECK_FALSE(cifarStem("auto", kCifarStemLargest + 1));
  CHECK_FALSE(cifarStem("auto", 224));
  CHECK(cifarStem("cifar", 224));
  CHECK_FALSE(cifarStem("imagenet", 28));
  CHECK_THROWS_WITH(cifarStem("resnet", 28),
                    Catch::Contains("unknown --stem 'resnet' (expected auto, cifar or imagenet)"));
  CHECK(parseError("--stem resnet").find("resnet") != std::string::npos);
}

TEST_CASE("the precision: auto by default, fp32, tf32, bf16 and fp16 taken, others refused") {
  TrainOptions o;
  REQUIRE(parseError("", &o).empty());
  CHECK(o.precision == "auto");
  REQUIRE(parseError("--precision fp32", &o).empty());
  CHECK(o.precision == "fp32");
  REQUIRE(parseError("--precision tf32", &o).empty());
  CHECK(o.precision == "tf32");
  REQUIRE(parseError("--precision bf16", &o).empty());
  CHECK(o.precision == "bf16");
  REQUIRE(parseError("--precision fp16", &o).empty());
  CHECK(o.precision == "fp16");
  CHECK(parseError("--precision fp64").find("fp64") != std::string::npos);
}

TEST_CASE("the GPU switches: graphs left to the run and the rest off by default, flags set them") {
  TrainOptions o;
  REQUIRE(parseError("", &o).empty());
  CHECK(o.cuda_graphs == "auto");
  CHECK_FALSE(o.cudnn_search);
  CHECK(o.copy_stream);
  REQUIRE(parseError("--cuda-graphs", &o).empty());
  CHECK(o.cuda_graphs == "on");
  CHECK_FALSE(o.cudnn_search);
  REQUIRE(parseError("--no-cuda-graphs", &o).empty());
  CHECK(o.cuda_graphs == "off");
  CHECK_FALSE(o.cudnn_deterministic);
  REQUIRE(parseError("--cudnn-search --no-copy-stream", &o).empty());
  CHECK(o.cuda_graphs == "auto");
  CHECK(o.cudnn_search);
  CHECK_FALSE(o.copy_stream);
  CHECK_FALSE(o.cudnn_deterministic);
  REQUIRE(parseError("--cudnn-deterministic", &o).empty());
  CHECK(o.cudnn_deterministic);
  CHECK_FALSE(o.cudnn_search);
  const std::string both = parseError("--cuda-graphs --no-cuda-graphs");
  CHECK(both.find("--cuda-graphs") != std::string::npos);
  CHECK(both.find("excludes") != std::string::npos);
}

TEST_CASE("the CUDA graph segment takes a size and is 25 MiB unless given") {
  TrainOptions o;
  REQUIRE(parseError("", &o).empty());
  CHECK(o.cuda_graph_segment == std::size_t(25) << 20);
  CHECK_FALSE(o.cuda_graph_segment_given);
  REQUIRE(parseError("--cuda-graph-segment 64K", &o).empty());
  CHECK(o.cuda_graph_segment == 65536);
  CHECK(o.cuda_graph_segment_given);
  REQUIRE(parseError("--cuda-graph-segment 0", &o).empty());
  CHECK(o.cuda_graph_segment == 0);
  CHECK(o.cuda_graph_segment_given);
  const std::string bad = parseError("--cuda-graph-segment lots");
  CHECK(bad.find("lots") != std::string::npos);
}

TEST_CASE("the convolution and batch-norm fusion: off by default, on with its flag") {
  TrainOptions o;
  REQUIRE(parseError("", &o).empty());
  CHECK_FALSE(o.cudnn_fusion);
  REQUIRE(parseError("--cudnn-fusion", &o).empty());
  CHECK(o.cudnn_fusion);
  CHECK(o.cuda_graphs == "auto");
}

TEST_CASE("the input's padding: none by default, the channels given") {
  TrainOptions o;
  REQUIRE(parseError("", &o).empty());
  CHECK(o.pad_input == 0);
  REQUIRE(parseError("--pad-input 4", &o).empty());
  CHECK(o.pad_input == 4);
}

TEST_CASE("the residual fusion: off by default, on with its flag") {
  TrainOptions o;
  REQUIRE(parseError("", &o).empty());
  CHECK_FALSE(o.fuse_residual);
  REQUIRE(parseError("--fuse-residual", &o).empty());
  CHECK(o.fuse_residual);
  CHECK_FALSE(o.cudnn_fusion);
}

TEST_CASE("an empty path is refused rather than taken as no file") {
  // "$CKPT" with CKPT unset would otherwise train from scratch, or write nothing.
  for (const char* flag :
       {"--resume", "--checkpoint", "--metrics", "--dump-params", "--data-dir"}) {
    INFO(flag);
    CLI::App app;
    TrainOptions o;
    addTrainOptions(app, o);
    std::vector<std::string> reversed{"", flag};  // CLI11 takes a vector last to first
    std::string error;
    try {
      app.parse(reversed);
    } catch (const CLI::ParseError& e) {
      error = e.what();
    }
    CHECK(error == std::string(flag) + ": an empty path (expected a file or folder name)");
  }
}
