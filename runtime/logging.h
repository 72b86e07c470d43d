// Accord's logger: spdlog, with the rank in every line.
#pragma once

#include <spdlog/spdlog.h>

#include <chrono>
#include <memory>
#include <string>

namespace accord {

// Before init() the rank is unknown and lines say "rank ?".
spdlog::logger& log();
// Called once the rank is known; `level` is ACCORD_LOG_LEVEL (validated by Config).
void configureLogging(int rank, const std::string& level);

// A duration as Accord's messages write it: seconds, shortest form ("0.5", "300").
std::string secondsText(std::chrono::milliseconds t);

}  // namespace accord
