// Helpers shared by validation.cc and coordinator.cc: message pieces and the naming of
// grouped-allreduce members. Internal to the runtime.
#pragma once

#include "runtime/message.h"

#include <string>
#include <string_view>
#include <vector>

namespace accord::detail {

// A joined rank cannot stand in for these: they need every rank's own participation.
bool needsEveryRank(RequestType t);
// "rank 2" or "ranks 2,3".
std::string ranksPhrase(const std::vector<int>& ranks);
// "allreduce 'w1': " — how every message about a request begins.
std::string prefix(const Request& r);
Response errorResponse(const std::string& name, std::string message, Response::ErrorKind kind);
// Scale factors agree when equal, NaN included.
bool sameScale(double a, double b);
// The index i of a member named "<group>.<i>" (canonical decimal), or -1.
int memberIndex(std::string_view name, const std::string& group);

}  // namespace accord::detail
