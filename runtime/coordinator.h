// Rank 0's negotiation logic for one process set, with no MPI in it.
//
// The coordinator keeps the message table (which ranks asked for which name), decides
// readiness (every rank that has not joined asked), validates that the requests agree,
// turns them into responses in a deterministic order, and reports stalls. The
// controller feeds it the requests it gathered and broadcasts what it returns.
#pragma once

#include "message.h"

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace accord {

using Clock = std::chrono::steady_clock;

// Builds the response for one name from the requests of every rank that sent one
// (requests[i].rank tells whose), or a ResponseType::Error response whose message
// names the tensor, the ranks and both values:
//   allreduce 'w1': rank 0 sent shape [4,3], rank 2 sent shape [4,5]
// `set_size` is the process set's size; ranks in `joined` sent nothing for this name.
Response buildResponse(const std::vector<Request>& requests, int set_size,
                       const std::vector<bool>& joined);

struct StallReport {
  std::string name;
  std::vector<int> missing_ranks;  // ranks that have not submitted `name`
  std::vector<int> joined_ranks;   // of those, the ones that have joined
  Clock::duration waiting;         // since the first rank submitted it
  RequestType type = RequestType::Allreduce;  // for the report's wording
  // What missing ranks submitted under the same caller's name as another collective
  // (the Python layer names an allreduce "x" allreduce.x, an allgather "x" allgather.x):
  // "rank 1 submitted allgather 'x'", the likely cause of the stall.
  std::vector<std::string> instead;
  std::vector<std::string> partners;  // those collectives' names in the table
};
// "allreduce 'w1' waited 61.2 s for rank 2 (submitted by ranks 0,1)" lines, one per tensor.
std::string formatStallReport(const std::vector<StallReport>& stalls, int set_size);

class Coordinator {
 public:
  explicit Coordinator(int set_size);

  // Records requests gathered from the ranks this cycle. A Join request marks its rank
  // joined until the join completes.
  void add(const std::vector<Request>& requests, Clock::time_point now);

  // Removes and returns the responses that became ready, in deterministic order:
  // names that became ready in this call are ordered by the submission counter of the
  // lowest-ranked submitter, then by name. Members of a group (grouped allreduce,
  // allgather or reducescatter) come out as one fused response once the whole group is
  // ready. Join completes (one Join response, root = last rank to join) when every rank
  // has joined.
  std::vector<Response> takeReady();

  // Names some ranks have submitted for at least `age`, with the ranks still missing.
  std::vector<StallReport> stalled(Clock::time_point now, Clock::duration age) const;
  // Removes the tensors stalled for at least `age` and returns one error response
  // (ErrorKind::Stall) per tensor carrying the report.
  std::vector<Response> expireStalled(Clock::time_point now, Clock::duration age);

  bool empty() const;
  const std::vector<bool>& joined() const { return joined_; }

 private:
  struct Entry {
    std::vector<Request> requests;  // at most one per rank
    Clock::time_point first_seen;
  };
  int set_size_;
  std::map<std::string, Entry> table_;
  std::vector<bool> joined_;
  int last_joined_ = -1;

  // Per rank: the name of its pending Join request (names may differ per rank).
  std::vector<std::string> join_names_;
  // Error responses decided in add() (a repeated name, a rank out of range), returned
  // first by the next takeReady().
  std::vector<Response> errors_;

  struct Ready;
  void fail(const Request& request, const std::string& message);
  bool isReady(const Entry& entry) const;
  std::vector<bool> joinedFor(const Entry& entry) const;
  std::vector<int> missingRanks(const Entry& entry) const;
  void takeGroup(const std::string& group, const std::vector<std::string>& members,
                 std::vector<Ready>& out);
  bool failGroupSizeMismatch(const std::string& group, const std::vector<std::string>& members,
                             std::vector<Ready>& out);
};

}  // namespace accord
