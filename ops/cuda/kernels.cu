// CUDA element-wise kernels (see kernels.h).
//
// Every kernel is a grid-stride loop: the grid is sized for the data up to a cap, and
// each thread steps by the whole grid, so any count works with one launch.
//
// Built without fast math: device division and the float <-> double conversions are
// then correctly rounded, which is what makes the results equal the host kernels'.
#include "ops/cuda/kernels.h"

#include "ops/cpu/integer_average.h"
#include "runtime/peer_watch.h"

#include <accord/error.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

namespace accord::cuda {

namespace {

constexpr int kThreads = 256;
constexpr std::size_t kMaxBlocks = 4096;

unsigned blocksFor(std::size_t work) {
  const std::size_t blocks = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::clamp<std::size_t>(blocks, 1, kMaxBlocks));
}

__device__ std::size_t firstIndex() {
  return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ std::size_t gridStride() { return static_cast<std::size_t>(gridDim.x) * blockDim.x; }

// ---- scaling -----------------------------------------------------------------------

// How a floating-point element is scaled, decided once on the host as cpu::scale does
// (ops/cpu/loops.h): by the factor rounded to T, by the divisor alone, or by
// factor / divisor rounded to T.
enum class FloatScaling { Multiply, Divide };

template <class T>
__global__ void scaleFloat(T* data, std::size_t n, FloatScaling how, T f, T d) {
  for (std::size_t i = firstIndex(); i < n; i += gridStride()) {
    switch (how) {
      case FloatScaling::Multiply:
        data[i] = data[i] * f;
        break;
      case FloatScaling::Divide:
        data[i] = data[i] / d;
        break;
    }
  }
}

// Integers as the host scales them (ops/cpu/integer_average.h): truncated toward zero.
template <class T>
__global__ void scaleInt(T* data, std::size_t n, double factor, double divisor) {
  for (std::size_t i = firstIndex(); i < n; i += gridStride())
    data[i] = cpu::scaleTruncated(data[i], factor, divisor);
}

__global__ void scaleHalf(__half* data, std::size_t n, float f) {
  for (std::size_t i = firstIndex(); i < n; i += gridStride())
    data[i] = __float2half_rn(__half2float(data[i]) * f);
}

__global__ void scaleBf16(__nv_bfloat16* data, std::size_t n, float f) {
  for (std::size_t i = firstIndex(); i < n; i += gridStride())
    data[i] = __float2bfloat16_rn(__bfloat162float(data[i]) * f);
}

template <class T>
void launchScaleFloat(void* data, std::size_t n, double factor, double divisor,
                      cudaStream_t stream) {
  const T d = static_cast<T>(divisor);
  FloatScaling how = FloatScaling::Multiply;
  T f = static_cast<T>(factor);
  if (divisor != 1.0) {
    if (factor == 1.0 && static_cast<double>(d) == divisor)
      how = FloatScaling::Divide;
    else
      f = static_cast<T>(factor / divisor);
  }
  scaleFloat<T><<<blocksFor(n), kThreads, 0, stream>>>(static_cast<T*>(data), n, how, f, d);
}

template <class T>
__global__ void divideInt(T* data, std::size_t n, std::int64_t divisor) {
  for (std::size_t i = firstIndex(); i < n; i += gridStride())
    data[i] = cpu::divideTruncated(data[i], divisor);
}

template <class T>
void launchScaleInt(void* data, std::size_t n, double factor, double divisor,
                    cudaStream_t stream) {
  if (cpu::dividesAsIntegers(factor, divisor)) {
    divideInt<T><<<blocksFor(n), kThreads, 0, stream>>>(static_cast<T*>(data), n,
                                                        static_cast<std::int64_t>(divisor));
    return;
  }
  scaleInt<T><<<blocksFor(n), kThreads, 0, stream>>>(static_cast<T*>(data), n, factor, divisor);
}

// ---- compression -------------------------------------------------------------------

__global__ void toHalf(const float* in, __half* out, std::size_t n) {
  for (std::size_t i = firstIndex(); i < n; i += gridStride()) out[i] = __float2half_rn(in[i]);
}

__global__ void toBf16(const float* in, __nv_bfloat16* out, std::size_t n) {
  for (std::size_t i = firstIndex(); i < n; i += gridStride())
    out[i] = __float2bfloat16_rn(in[i]);
}

__global__ void fromHalf(const __half* in, float* out, std::size_t n) {
  for (std::size_t i = firstIndex(); i < n; i += gridStride()) out[i] = __half2float(in[i]);
}

__global__ void fromBf16(const __nv_bfloat16* in, float* out, std::size_t n) {
  for (std::size_t i = firstIndex(); i < n; i += gridStride()) out[i] = __bfloat162float(in[i]);
}

void requireHalf(DType dtype, const char* what) {
  if (dtype != DType::Float16 && dtype != DType::BFloat16)
    throw InvalidArgument(std::string(what) + ": compressed dtype must be float16 or bfloat16, got " +
                          dtype_name(dtype));
}

// ---- batched copy ------------------------------------------------------------------

struct Batch {
  CopyPiece piece[kPiecesPerLaunch];
};
// Kernel parameters are limited to 4 KiB.
static_assert(sizeof(Batch) <= 4000);

// blockIdx.y picks the piece; the x blocks share its bytes. 16-byte words where both
// ends are 16-byte aligned, 4-byte words where they are 4-byte aligned, else bytes.
__global__ void copyPieces(Batch batch) {
  const CopyPiece p = batch.piece[blockIdx.y];
  const auto dst = reinterpret_cast<std::uintptr_t>(p.dst);
  const auto src = reinterpret_cast<std::uintptr_t>(p.src);
  std::size_t words = 0, word = 1;
  if (((dst | src) & 15) == 0) {
    word = 16;
    words = p.bytes / 16;
    auto* d = static_cast<uint4*>(p.dst);
    const auto* s = static_cast<const uint4*>(p.src);
    for (std::size_t i = firstIndex(); i < words; i += gridStride()) d[i] = s[i];
  } else if (((dst | src) & 3) == 0) {
    word = 4;
    words = p.bytes / 4;
    auto* d = static_cast<std::uint32_t*>(p.dst);
    const auto* s = static_cast<const std::uint32_t*>(p.src);
    for (std::size_t i = firstIndex(); i < words; i += gridStride()) d[i] = s[i];
  }
  auto* d = static_cast<unsigned char*>(p.dst);
  const auto* s = static_cast<const unsigned char*>(p.src);
  for (std::size_t i = words * word + firstIndex(); i < p.bytes; i += gridStride()) d[i] = s[i];
}

// ---- fill --------------------------------------------------------------------------

template <class T>
__global__ void fillWith(T* data, std::size_t n, T value) {
  for (std::size_t i = firstIndex(); i < n; i += gridStride()) data[i] = value;
}

template <class T>
void launchFill(void* data, std::size_t n, const void* value, cudaStream_t stream) {
  T v;
  std::memcpy(&v, value, sizeof v);
  fillWith<T><<<blocksFor(n), kThreads, 0, stream>>>(static_cast<T*>(data), n, v);
}

}  // namespace

void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  noteIfContextLost(status, what);
  throw CommError(std::string(what) + ": " + cudaGetErrorString(status));
}

bool contextLost(cudaError_t status) {
  switch (status) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
      return true;
    default:
      return false;
  }
}

void noteIfContextLost(cudaError_t status, const std::string& what) {
  if (!contextLost(status)) return;
  int device = -1;
  cudaGetDevice(&device);
  PeerWatch::instance().ownFailure(what + ": " + cudaGetErrorString(status) + " on cuda:" +
                                   std::to_string(device));
}

void scale(void* data, std::size_t count, DType dtype, double factor, double divisor,
           cudaStream_t stream) {
  if (count == 0 || (factor == 1.0 && divisor == 1.0)) return;
  switch (dtype) {
    case DType::UInt8:
      launchScaleInt<std::uint8_t>(data, count, factor, divisor, stream);
      break;
    case DType::Int8:
      launchScaleInt<std::int8_t>(data, count, factor, divisor, stream);
      break;
    case DType::Int32:
      launchScaleInt<std::int32_t>(data, count, factor, divisor, stream);
      break;
    case DType::Int64:
      launchScaleInt<std::int64_t>(data, count, factor, divisor, stream);
      break;
    case DType::Float16:
      scaleHalf<<<blocksFor(count), kThreads, 0, stream>>>(static_cast<__half*>(data), count,
                                                           static_cast<float>(factor / divisor));
      break;
    case DType::BFloat16:
      scaleBf16<<<blocksFor(count), kThreads, 0, stream>>>(
          static_cast<__nv_bfloat16*>(data), count, static_cast<float>(factor / divisor));
      break;
    case DType::Float32:
      launchScaleFloat<float>(data, count, factor, divisor, stream);
      break;
    case DType::Float64:
      launchScaleFloat<double>(data, count, factor, divisor, stream);
      break;
    case DType::Int16:
      launchScaleInt<std::int16_t>(data, count, factor, divisor, stream);
      break;
    case DType::UInt16:
      launchScaleInt<std::uint16_t>(data, count, factor, divisor, stream);
      break;
    case DType::Bool:  // refused at submission, as on the host
      throw InvalidArgument("cuda::scale: bool tensors cannot be scaled");
    default:
      throw InvalidArgument("cuda::scale: unknown dtype " + std::to_string(static_cast<int>(dtype)));
  }
  check(cudaGetLastError(), "cuda::scale: kernel launch");
}

void compress(const float* in, void* out, std::size_t count, DType to, cudaStream_t stream) {
  requireHalf(to, "cuda::compress");
  if (count == 0) return;
  if (to == DType::Float16)
    toHalf<<<blocksFor(count), kThreads, 0, stream>>>(in, static_cast<__half*>(out), count);
  else
    toBf16<<<blocksFor(count), kThreads, 0, stream>>>(in, static_cast<__nv_bfloat16*>(out), count);
  check(cudaGetLastError(), "cuda::compress: kernel launch");
}

void decompress(const void* in, float* out, std::size_t count, DType from, cudaStream_t stream) {
  requireHalf(from, "cuda::decompress");
  if (count == 0) return;
  if (from == DType::Float16)
    fromHalf<<<blocksFor(count), kThreads, 0, stream>>>(static_cast<const __half*>(in), out, count);
  else
    fromBf16<<<blocksFor(count), kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(in), out,
                                                        count);
  check(cudaGetLastError(), "cuda::decompress: kernel launch");
}

void fill(void* data, std::size_t count, std::size_t elem_bytes, const void* value,
          cudaStream_t stream) {
  if (count == 0) return;
  switch (elem_bytes) {
    case 1:
      launchFill<std::uint8_t>(data, count, value, stream);
      break;
    case 2:
      launchFill<std::uint16_t>(data, count, value, stream);
      break;
    case 4:
      launchFill<std::uint32_t>(data, count, value, stream);
      break;
    case 8:
      launchFill<std::uint64_t>(data, count, value, stream);
      break;
    default:
      throw InvalidArgument("cuda::fill: elements of " + std::to_string(elem_bytes) +
                            " bytes; expected 1, 2, 4 or 8");
  }
  check(cudaGetLastError(), "cuda::fill: kernel launch");
}

void batchedCopy(std::span<const CopyPiece> pieces, cudaStream_t stream) {
  for (std::size_t first = 0; first < pieces.size(); first += kPiecesPerLaunch) {
    Batch batch{};
    unsigned n = 0;
    std::size_t largest = 0;
    for (std::size_t i = first; i < std::min(pieces.size(), first + kPiecesPerLaunch); ++i) {
      if (pieces[i].bytes == 0) continue;
      batch.piece[n++] = pieces[i];
      largest = std::max(largest, pieces[i].bytes);
    }
    if (n == 0) continue;
    // Sized for the largest piece's 16-byte words; smaller pieces leave blocks idle.
    const dim3 grid(blocksFor((largest + 15) / 16), n);
    copyPieces<<<grid, kThreads, 0, stream>>>(batch);
    check(cudaGetLastError(), "cuda::batchedCopy: kernel launch");
  }
}

}  // namespace accord::cuda
