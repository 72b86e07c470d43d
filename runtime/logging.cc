// One stderr logger for the whole process. Its pattern carries the rank so that the
// interleaved output of mpirun stays readable.
#include "logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdio>

namespace accord {

namespace {

std::shared_ptr<spdlog::logger> makeLogger() {
  auto logger = spdlog::stderr_color_mt("accord");
  logger->set_pattern("[%H:%M:%S.%e] [accord rank ?] [%^%l%$] %v");
  logger->set_level(spdlog::level::warn);
  return logger;
}

}  // namespace

spdlog::logger& log() {
  static std::shared_ptr<spdlog::logger> logger = makeLogger();
  return *logger;
}

void configureLogging(int rank, const std::string& level) {
  auto& logger = log();
  logger.set_pattern("[%H:%M:%S.%e] [accord rank " + std::to_string(rank) + "] [%^%l%$] %v");
  logger.set_level(spdlog::level::from_str(level));
  // Warnings and errors explain failures that may end the process: never buffer them.
  logger.flush_on(spdlog::level::warn);
}

std::string secondsText(std::chrono::milliseconds t) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", t.count() / 1000.0);
  return buf;
}

}  // namespace accord
