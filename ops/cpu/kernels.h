// Element-wise kernels the host collectives need: reduce, scale, neutral fill, and the
// parallel copy that moves tensors in and out of the fusion buffer.
//
// No MPI here: these are linked into accord_core and unit-tested in one process. The
// MPI backend calls them directly and from the custom MPI_Ops for float16/bfloat16.
// Large buffers are split across threads with oneTBB; each thread's inner loop is a
// plain loop over one dtype that GCC vectorizes.
#pragma once

#include <accord/accord.h>

#include <cstddef>
#include <span>

namespace accord::cpu {

// How many threads the kernels may use; 0 (the default) means all cores. The runtime
// sets cores / ranks-per-host, because ranks sharing a host already fill its cores and
// more threads only preempt each other (and the ranks' MPI progress).
void setThreads(int threads);

// acc[i] = op(acc[i], in[i]) for `count` elements of `dtype`. Average reduces like Sum
// (the caller divides afterwards). Bool: Sum, Average and Max are logical or, Min and
// Product logical and. Signed integer Sum and Product wrap around (two's
// complement) instead of overflowing, as MPI's built-in operations do in practice.
// float16/bfloat16 are computed in float and rounded to nearest-even.
void reduce(void* acc, const void* in, std::size_t count, DType dtype, ReduceOp op);

// acc = scale(op(...op(op(acc, ins[0]), ins[1])..., ins[k-1])), then mirror = acc
// (mirror may be null). The same values as reduce() once per input, then scale(), then
// a copy, but in one pass: the buffer is worked through in L1-sized blocks, so the
// scaling and the copy read what the reduction just wrote while it is still in L1.
void reduceScaleMirror(void* acc, std::span<const void* const> ins, std::size_t count,
                       DType dtype, ReduceOp op, double factor, double divisor, void* mirror);

// out = scale(op(...op(first, ins[0])..., ins[k-1])): reduceScaleMirror's values with
// `first` as the accumulator's starting value, which stays as it was. Where the first
// operand is not ours to modify (a reduce-scatter's input), this saves a pass copying it
// into the output beforehand: each L1 block is copied, reduced and scaled in one go.
void reduceScaleFrom(const void* first, std::span<const void* const> ins, std::size_t count,
                     DType dtype, ReduceOp op, double factor, double divisor, void* out);

// inout = scale(op(acc, inout)): reduceScaleMirror's values for one input, written into
// that input and acc left as it was. Where the result belongs in the input's place (a
// ring's last reduction step in place), this saves writing acc and copying it over.
void reduceScaleInto(const void* acc, void* inout, std::size_t count, DType dtype, ReduceOp op,
                     double factor, double divisor);

// data[i] = data[i] * factor / divisor.
// Floating point, as Horovod scales: a factor alone is rounded to the type and
// multiplies in it, and so does factor/divisor where both are given; a divisor alone
// (an Average) divides, correctly rounded. float16/bfloat16 go through float with one
// multiply by factor/divisor rounded to float.
// Integers, as Horovod scales them: computed in double and truncated toward zero
// (5/2 -> 2, -5/2 -> -2), saturated to the type's range; a division alone by a whole
// number (an Average) is an exact integer division, truncated alike
// (integer_average.h). Bool tensors cannot be scaled (InvalidArgument).
void scale(void* data, std::size_t count, DType dtype, double factor, double divisor = 1.0);

// Fills with op's neutral element: 0 for Sum/Average, the largest value (+inf for
// floating point) for Min, the lowest (-inf) for Max, 1 for Product. A joined rank
// contributes this so it does not change the result.
void fillNeutral(void* data, std::size_t count, DType dtype, ReduceOp op);

// Adasum's arithmetic on one tensor (floating point only; InvalidArgument otherwise).
// The dot product a.b and the squared norms |a|^2, |b|^2, summed in double: a tensor of
// values near float's smallest or largest keeps its direction. The sum runs in fixed
// blocks, added in order, so that every rank computing the same pair gets the same bits
// whatever the thread count.
struct AdasumDots {
  double ab = 0, aa = 0, bb = 0;
};
AdasumDots adasumDots(const void* a, const void* b, std::size_t count, DType dtype);
// The weights of a and b in Adasum(a, b) = wa a + wb b: wa = 1 - a.b / (2 |a|^2), and
// 1 where |a|^2 is below the smallest normal double (a is zero then, near enough, and
// b passes unchanged); wb alike.
struct AdasumWeights {
  double a = 1, b = 1;
};
AdasumWeights adasumWeights(const AdasumDots& dots);
// out[i] = wa * a[i] + wb * b[i], in double, rounded once to the dtype (16-bit formats
// through float). `out` may be a or b. Both ranks of a pair pass their operands in the
// same order, so that they compute the same expression and hold the same bits.
void adasumCombine(const void* a, const void* b, void* out, std::size_t count, DType dtype,
                   const AdasumWeights& w);

struct CopyPiece {
  void* dst;
  const void* src;
  std::size_t bytes;
};
// Copies every piece; pieces must not overlap each other. Many small pieces and a few
// huge ones are balanced alike: the work is split by bytes, not by piece.
void parallelCopy(std::span<const CopyPiece> pieces);

// Below this many bytes a kernel runs on the calling thread (see kernels.cc).
inline constexpr std::size_t kParallelGrainBytes = 128 * 1024;

}  // namespace accord::cpu
