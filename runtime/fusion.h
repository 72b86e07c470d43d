// Fusion planning: merges neighbouring compatible responses into one buffer's worth.
//
// Pure and deterministic, so every rank plans the same groups from the same response
// list. Only allreduce, allgather and reducescatter responses fuse; two neighbours fuse
// when type, dtype, device, op and scale factors agree and the merged payload stays
// within the threshold. A response that is already over the threshold stays alone (it
// is reduced in place, without copies). Threshold 0 disables fusion.
#pragma once

#include "message.h"

#include <cstddef>
#include <vector>

namespace accord {

bool fusible(const Response& a, const Response& b);

std::vector<Response> planFusion(std::vector<Response> responses, std::size_t threshold_bytes);

}  // namespace accord
