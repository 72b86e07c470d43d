// Checks and names every backend's ops share (see checks.h).
#include "ops/common/checks.h"

#include "ops/common/fusion_buffer.h"

#include <accord/error.h>

namespace accord {

std::string describe(const Response& response) {
  std::string out = responseTypeName(response.type);
  for (std::size_t i = 0; i < response.names.size(); ++i)
    out += (i ? ", '" : " '") + response.names[i] + "'";
  return out;
}

std::string describeTensor(const Response& response, std::size_t i) {
  return describeCollective(responseTypeName(response.type), response.names.at(i));
}

std::string joinRanks(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

void checkInput(const Response& response, std::size_t i, const TensorEntry& entry,
                std::size_t bytes) {
  const TensorView& t = entry.tensor;
  if (t.dtype != response.dtype || t.bytes() != bytes || (bytes > 0 && t.data == nullptr))
    throw InvalidArgument(describeTensor(response, i) + ": local input is " + dtype_name(t.dtype) +
                          shape_string(t.shape) + " (" + std::to_string(t.bytes()) +
                          " bytes), the negotiated response needs " + dtype_name(response.dtype) +
                          " with " + std::to_string(bytes) + " bytes");
}

bool prepareLocal(TensorEntry& entry, const std::function<void()>& prepare) {
  try {
    prepare();
    return true;
  } catch (...) {
    entry.error = std::current_exception();
    return false;
  }
}

bool localInput(const Response& response, std::size_t i, TensorEntry* entry, std::size_t bytes) {
  return entry && !entry->error &&
         prepareLocal(*entry, [&] { checkInput(response, i, *entry, bytes); });
}

std::vector<bool> localInputs(const Response& response, std::vector<TensorEntry*>& entries) {
  std::vector<bool> local(entries.size());
  for (std::size_t i = 0; i < entries.size(); ++i)
    local[i] = localInput(response, i, entries[i], response.tensorBytes(i));
  return local;
}

TensorView allocateOutput(const Response& response, std::size_t i, TensorEntry& entry,
                          const Shape& shape) {
  if (!entry.output)
    throw InvalidArgument(describeTensor(response, i) + ": no output allocator was given");
  TensorView out = entry.output(shape);
  const std::size_t need =
      static_cast<std::size_t>(num_elements(shape)) * dtype_size(response.dtype);
  if (out.dtype != response.dtype || out.bytes() < need || (need > 0 && out.data == nullptr))
    throw InvalidArgument(
        describeTensor(response, i) + ": the output allocator returned " + dtype_name(out.dtype) +
        shape_string(out.shape) + (out.data ? "" : " with no storage") + ", expected " +
        dtype_name(response.dtype) + shape_string(shape) + " (" + std::to_string(need) + " bytes)");
  return out;
}

void* outputOrSpare(FusionBuffer& spare, const Response& response, std::size_t i,
                    TensorEntry& entry, const Shape& shape) {
  void* out = nullptr;
  if (prepareLocal(entry, [&] { out = allocateOutput(response, i, entry, shape).data; }))
    return out;
  const std::size_t bytes =
      static_cast<std::size_t>(num_elements(shape)) * dtype_size(response.dtype);
  return spare.reserve(bytes);
}

}  // namespace accord
