// Element-wise kernels the device collectives need, on CUDA streams: scaling, fp16 /
// bf16 compression, and the batched copy that moves many tensors in and out of the
// device fusion buffer in one launch.
//
// Every function only enqueues work on `stream` and returns; errors of the launch are
// thrown as CommError naming the kernel. The results equal the host kernels'
// (ops/cpu/kernels.h) element for element, so a tensor reduced on either path is the
// same: the unit tests in tests/ops/gpu compare the two.
#pragma once

#include <accord/tensor.h>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <span>

namespace accord::cuda {

// data[i] = data[i] * factor / divisor, with the rounding of cpu::scale: a factor (or
// factor / divisor) rounded to the element type and multiplied in it, a divisor alone
// divided, float16/bfloat16 through float, integers truncated toward zero as Horovod
// does (an exact integer division for an Average, else through double) and saturated;
// bool refused.
void scale(void* data, std::size_t count, DType dtype, double factor, double divisor,
           cudaStream_t stream);

// float32 -> float16 or bfloat16 (rounded to nearest-even), and back.
void compress(const float* in, void* out, std::size_t count, DType to, cudaStream_t stream);
void decompress(const void* in, float* out, std::size_t count, DType from, cudaStream_t stream);

struct CopyPiece {
  void* dst;
  const void* src;
  std::size_t bytes;
};
// Copies every piece (device memory, not overlapping) with as few launches as the
// pieces allow: up to kPiecesPerLaunch pieces go in one launch, however small, where
// one cudaMemcpyAsync each would pay a launch per tensor.
void batchedCopy(std::span<const CopyPiece> pieces, cudaStream_t stream);
inline constexpr std::size_t kPiecesPerLaunch = 128;

// Sets `count` elements of `elem_bytes` bytes (1, 2, 4 or 8; `data` aligned to it) to
// the element at `value`, which is host memory read before this returns. How device
// ops fill a joined rank's contribution with the op's neutral element, as computed by
// cpu::fillNeutral, so that both paths use the same bits.
void fill(void* data, std::size_t count, std::size_t elem_bytes, const void* value,
          cudaStream_t stream);

// Throws CommError("<what>: <CUDA's error string>") unless `status` is cudaSuccess.
// An error that means this process's CUDA context is lost is also told to the other
// ranks (noteIfContextLost).
void check(cudaError_t status, const char* what);

// Whether `status` is one of the errors after which the CUDA context is lost: a kernel
// faulted, and every later call in this process fails the same way.
bool contextLost(cudaError_t status);
// Where it is, records "<what>: <CUDA's message> on cuda:<device>" as this rank's own
// GPU failure (runtime/peer_watch.h), which the next negotiation round tells every rank,
// so that their failed device collectives name this rank.
void noteIfContextLost(cudaError_t status, const std::string& what);

}  // namespace accord::cuda
