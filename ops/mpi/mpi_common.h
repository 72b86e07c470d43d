// Helpers the MPI ops share: argument checks that name the tensor, output allocation,
// chunked in-place collectives, scaling, and byte layouts for the v-collectives.
//
// MPI counts are ints. Byte layouts that do not fit are expressed in a larger
// contiguous unit (the gcd of all counts and displacements, usually the row size), and
// only when even that overflows do we throw, naming the tensor and the sizes.
#pragma once

#include "ops/op.h"

#include <cstddef>
#include <string>
#include <vector>

namespace accord::mpi {

// p, or a valid dummy address when p is null: a size-0 tensor may have no storage,
// and MPI implementations are free to reject null buffers even with count 0.
void* nonNull(void* p);
const void* nonNull(const void* p);

// "allreduce 'a', 'b'": how error messages name a response's tensors.
std::string describe(const Response& response);
std::string describeTensor(const Response& response, std::size_t i);

// Bytes of one row: the product of the dims after the first, times the dtype size.
// A 0-d tensor counts as one row of one element.
std::size_t rowBytes(const Shape& shape, DType dtype);

// Throws InvalidArgument unless entry's input has `dtype` and exactly `bytes` bytes.
void checkInput(const Response& response, std::size_t i, const TensorEntry& entry,
                std::size_t bytes);
// Calls entry.output(shape) and checks the view: right dtype, at least numel(shape)
// elements, non-null storage when non-empty.
TensorView allocateOutput(const Response& response, std::size_t i, TensorEntry& entry,
                          const Shape& shape);

// In-place MPI_Allreduce / MPI_Bcast over `count` elements, cut into the fewest
// near-equal pieces of at most config->chunk_bytes (element-aligned; 0 = one call,
// bounded by INT_MAX elements).
struct Scaling;
// Reduces in pieces of ACCORD_CHUNK_BYTES; `pre` scales each piece just before its call
// and `post` just after, while the piece is still in cache (a separate pass over a
// 100 MB gradient set costs as much as a third of its reduction).
void chunkedAllreduce(const ExecContext& ctx, void* data, std::size_t count, DType dtype,
                      ReduceOp op, const Scaling& pre, const Scaling& post);
void chunkedBroadcast(const ExecContext& ctx, void* data, std::size_t bytes, int root);

// Scaling applied around a reduction: prescale, then postscale divided by the set
// size for Average. isOne() lets callers skip a pass that would multiply by 1.
struct Scaling {
  double factor = 1.0;
  double divisor = 1.0;
  bool isOne() const { return factor == 1.0 && divisor == 1.0; }
};
Scaling preScaling(const Response& response);
Scaling postScaling(const Response& response, int set_size);
void applyScaling(const Scaling& s, void* data, std::size_t count, DType dtype);

// Counts and displacements in bytes, turned into MPI ints of a contiguous unit type.
class ByteLayout {
 public:
  ByteLayout(const std::vector<std::size_t>& counts, const std::vector<std::size_t>& displs,
             const std::string& what);
  ~ByteLayout();
  ByteLayout(const ByteLayout&) = delete;
  ByteLayout& operator=(const ByteLayout&) = delete;

  std::vector<int> counts;
  std::vector<int> displs;
  MPI_Datatype type = MPI_BYTE;

 private:
  bool derived_ = false;
};

}  // namespace accord::mpi
