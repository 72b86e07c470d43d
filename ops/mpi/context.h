// What the host ops run with: the set's MPI link and, where they apply, its
// shared-memory window and hierarchy, beside the buffers every op shares.
//
// The dispatcher hands every op the same ExecContext, whose transport is the
// interface all backends see; contextOf() takes the host transport's parts out of it,
// checked, once per response.
#pragma once

#include "ops/common/op.h"

namespace accord::shm {
class SharedMemory;
}

namespace accord::mpi {

class Hierarchy;
class Link;

struct Context {
  Link& link;              // the set's communicator, with deadline-bounded waits
  shm::SharedMemory* shm;  // set when every member shares this host (ACCORD_SHARED_MEMORY)
  // Set when the set spans hosts evenly and ACCORD_HIERARCHICAL_ALLREDUCE is on: host
  // allreduces go through it instead of the flat ring.
  Hierarchy* hierarchy;
  const Config& config;
  FusionBuffer& fusion;   // fused tensors, packed layouts, a joined rank's neutral input
  FusionBuffer& scratch;  // the rings' temporaries
  FusionBuffer& spare;    // stands in for an output this rank failed to allocate
  int rank() const;
  int size() const;
};

// The host transport's parts of ctx's set. Throws Error where the set's transport is
// not the host transport (MpiTransport), which connect() always makes.
Context contextOf(ExecContext& ctx);

}  // namespace accord::mpi
