// Elastic commits' paths, the re-cut of a position for another number of ranks, and
// the failure report; see elastic.h. The commit and resume themselves are in
// trainer_elastic.cc, beside the trainer's state they move.
#include "elastic.h"

#include "metrics.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <regex>

namespace accord::resnet {
namespace {

std::string hostName() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}

// One write(2): the line reaches mpirun whole, even from a process about to _exit.
void writeReport(const std::string& line) {
  [[maybe_unused]] const ssize_t n = ::write(2, line.data(), line.size());
}

}  // namespace

std::string elasticStoreDirectory() {
  const char* job = std::getenv("ACCORDRUN_ELASTIC_JOB");
  if (job == nullptr || *job == '\0') return "";
  const char* base = std::getenv("ACCORDRUN_ELASTIC_STORE");
  return std::string(base != nullptr && *base != '\0' ? base : "/tmp/accord-elastic") + "/" + job +
         "/" + hostName();
}

int elasticRestarts() {
  const char* reset = std::getenv("ACCORDRUN_ELASTIC_RESET");
  return reset != nullptr ? std::atoi(reset) : 0;
}

TrainState reshard(const TrainState& state, const StepGeometry& saved, const StepGeometry& now,
                   std::int64_t steps_per_epoch) {
  TrainState out = state;
  if (saved.globalBatch() <= 0 || saved.globalBatch() == now.globalBatch()) return out;
  const std::int64_t done = state.step_in_epoch * saved.globalBatch();  // samples this epoch
  out.step_in_epoch = std::min(done / now.globalBatch(), steps_per_epoch);
  out.global_step = state.epoch * steps_per_epoch + out.step_in_epoch;
  return out;
}

std::vector<int> blamedRanks(const std::string& message) {
  static const std::regex blamed(
      R"(\branks? ([0-9]+(?:, [0-9]+)*)(?:(?: did not [^;.]*?and)?(?: also)? stopped answering| did not answer either))");
  std::vector<int> ranks;
  for (auto it = std::sregex_iterator(message.begin(), message.end(), blamed);
       it != std::sregex_iterator(); ++it) {
    const std::string list = (*it)[1];
    for (std::size_t at = 0; at < list.size();) {
      std::size_t used = 0;
      ranks.push_back(std::stoi(list.substr(at), &used));
      at += used;
      while (at < list.size() && (list[at] == ',' || list[at] == ' ')) ++at;
    }
  }
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

// 600 bytes stay within PIPE_BUF with the report's other fields even where quoting makes
// each byte a six-byte escape.
std::string reportedError(const std::string& error) {
  constexpr std::size_t kMostBytes = 600;
  std::string line = error.substr(0, error.find('\n'));
  if (line.size() > kMostBytes) line = line.substr(0, kMostBytes) + " ...";
  return line;
}

void reportFailure(int rank, const std::string& error, std::int64_t step, std::int64_t commit) {
  std::string lost;
  for (const int r : blamedRanks(error)) lost += (lost.empty() ? "" : ", ") + std::to_string(r);
  const std::string line = "[accord-elastic] {\"commit\": " + std::to_string(commit) +
                           ", \"error\": " + jsonQuoted(reportedError(error)) +
                           ", \"event\": \"failed\", \"host\": " + jsonQuoted(hostName()) +
                           ", \"lost_ranks\": [" + lost + "], \"rank\": " + std::to_string(rank) +
                           ", \"step\": " + std::to_string(step) + "}\n";
  writeReport(line);
}

void reportRaised(int rank, const std::string& error) {
  writeReport(
      "[accord-elastic] {\"error\": " + jsonQuoted("accord-resnet: " + reportedError(error)) +
      ", \"event\": \"raised\", \"host\": " + jsonQuoted(hostName()) +
      ", \"rank\": " + std::to_string(rank) + "}\n");
}

}  // namespace accord::resnet
