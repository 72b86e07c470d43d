// Byte encoding of requests and responses for the negotiation messages.
//
// Little-endian, length-prefixed, versioned by a leading magic word. Decoding checks
// every length against the bytes that remain and throws CommError naming what was
// truncated or malformed: a corrupt message must never become a wild read.
#pragma once

#include "message.h"

#include <cstdint>
#include <span>
#include <vector>

namespace accord {

std::vector<std::uint8_t> encodeRequests(const std::vector<Request>& requests);
std::vector<Request> decodeRequests(std::span<const std::uint8_t> bytes);

std::vector<std::uint8_t> encodeResponses(const ResponseList& list);
ResponseList decodeResponses(std::span<const std::uint8_t> bytes);

}  // namespace accord
