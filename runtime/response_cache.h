// The response cache: lets steady-state training skip per-tensor negotiation.
//
// Every rank holds an identical cache because every rank applies the same put / touch
// / erase sequence (the executed response list, in order). A cached tensor is agreed
// by setting its slot's bit; one bitwise-AND all-reduce of the bit vectors tells which
// tensors every rank has submitted. A request whose name is cached but whose signature
// changed (dtype, shape, op, ...) is Invalid: its rank clears the slot's "valid" bit
// and every rank erases the slot, so the tensor is negotiated afresh.
#pragma once

#include "message.h"

#include <cstddef>
#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace accord {

class ResponseCache {
 public:
  explicit ResponseCache(std::size_t capacity);  // 0 disables the cache

  enum class Status { Miss, Hit, Invalid };
  struct Lookup {
    Status status = Status::Miss;
    std::uint32_t slot = 0;  // meaningful for Hit and Invalid
  };
  // Compares the request's signature (RequestSignature's ==, so not rank and seq) with
  // that of the local request stored for the same name.
  Lookup lookup(const Request& request) const;

  // Caches an executed single-tensor response with this rank's own request for it
  // (nullopt on a joined rank, which had none). Only Allreduce, Allgather, Broadcast,
  // Alltoall and Reducescatter are cacheable; other types are ignored. Takes the
  // lowest free slot, evicting the least recently used entry when full.
  void put(const Response& response, const std::optional<Request>& local);
  void touch(std::uint32_t slot);  // mark most recently used
  void erase(std::uint32_t slot);

  bool contains(std::uint32_t slot) const;
  const Response& response(std::uint32_t slot) const;
  std::size_t capacity() const { return capacity_; }
  std::size_t size() const { return by_name_.size(); }
  std::size_t words() const { return (capacity_ + 63) / 64; }  // longest bit vector
  // Bit-vector length that covers every slot in use: what a cycle exchanges. Identical
  // on every rank, since the caches are; usually far below words() (a 4 KiB step
  // exchanged 392 bytes per rank with the default capacity, 32 once trimmed).
  std::size_t activeWords() const { return (in_use_end_ + 63) / 64; }

 private:
  struct Slot {
    bool used = false;
    Response response;
    std::optional<RequestSignature> local;
    std::list<std::uint32_t>::iterator lru_pos;
  };
  std::size_t capacity_;
  std::vector<Slot> slots_;
  std::unordered_map<std::string, std::uint32_t> by_name_;
  std::list<std::uint32_t> lru_;  // front = most recently used
  std::size_t in_use_end_ = 0;    // 1 + the highest slot in use; 0 when empty
};

}  // namespace accord
