// Test hook: the epilogue's rounding functions applied elementwise. Portable:
// built by nvcc into the CUDA kernels and for every AMD architecture
// (BUILD: round_bf16_hip).
#include "kernels/gpu/attention/round_bf16.h"

#include <cstdint>

#include "kernels/gpu/attention/round_bf16.cuh"

namespace kernelserve {
namespace gpu {
namespace attention {
namespace {

__global__ void RoundKernel(const float* in, uint16_t* out, int64_t n, int rounding) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float x = in[i];
  uint32_t r;
  switch (rounding) {
    case kFlashRtna: r = RoundBf16Rtna(x); break;
    case kFlashRtz: r = RoundBf16Rtz(x); break;
    default: r = RoundBf16Rtne(x); break;
  }
  out[i] = static_cast<uint16_t>(r);
}

}  // namespace

cudaError_t RoundToBf16OnDevice(const float* in, uint16_t* out, int64_t n, int rounding, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const int threads = 256;
  const int64_t blocks = (n + threads - 1) / threads;
  RoundKernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(in, out, n, rounding);
  return cudaGetLastError();
}

}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve
