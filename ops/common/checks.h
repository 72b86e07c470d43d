// What every backend's ops do to a response's entries before moving bytes: how
// messages name tensors, the check of this rank's input, and output allocation that
// never leaves the other ranks waiting.
#pragma once

#include "runtime/message.h"
#include "runtime/tensor_entry.h"

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace accord {

class FusionBuffer;

// "allreduce 'a', 'b'": how error messages name a response's tensors.
std::string describe(const Response& response);
std::string describeTensor(const Response& response, std::size_t i);
// "2", "1, 3": ranks for messages.
std::string joinRanks(const std::vector<int>& ranks);

// Throws InvalidArgument unless entry's input has `dtype` and exactly `bytes` bytes.
void checkInput(const Response& response, std::size_t i, const TensorEntry& entry,
                std::size_t bytes);

// Runs `prepare` (a check or an output allocation of this rank's entry). When it
// throws, the error goes into entry.error and this returns false: the caller then does
// this rank's part with scratch space, as a joined rank does, so the other ranks are
// never left waiting in the collective, and the handle fails afterwards.
bool prepareLocal(TensorEntry& entry, const std::function<void()>& prepare);

// Whether entry i is this rank's own usable input of `bytes` bytes: not joined (null),
// not failed already, and passing checkInput (whose failure goes into its error).
bool localInput(const Response& response, std::size_t i, TensorEntry* entry, std::size_t bytes);
// localInput of every entry, at the response's own size of each tensor.
std::vector<bool> localInputs(const Response& response, std::vector<TensorEntry*>& entries);

// Calls entry.output(shape) and checks the view: right dtype, at least numel(shape)
// elements, non-null storage when non-empty.
TensorView allocateOutput(const Response& response, std::size_t i, TensorEntry& entry,
                          const Shape& shape);
// entry's host output for `shape` through prepareLocal; on failure a stand-in of the
// same size from `spare`, whose contents are discarded.
void* outputOrSpare(FusionBuffer& spare, const Response& response, std::size_t i,
                    TensorEntry& entry, const Shape& shape);

}  // namespace accord
