#include "kernels/gpu/fp8_attention/fp8_quantize.h"

#include <algorithm>
#include <cstdint>

#include "kernels/gpu/common/fp8.cuh"
#include "kernels/gpu/common/gpu.h"
#include "kernels/gpu/fp8_attention/hadamard_scale.h"
#if defined(__CUDA_ARCH__)
#include "kernels/gpu/arch/sm80/mma.cuh"
#endif

namespace kernelserve {
namespace gpu {
namespace fp8_attention {
namespace {

// A row of the input is handled by 32 lanes: a warp on CUDA, half a wave64
// on AMD (the shuffles below stay within their 32 lanes either way).
constexpr int kRowLanes = 32;

// The e4m3fn code of y: CUDA's conversion instruction, elsewhere the same
// codes by bit arithmetic (common/fp8_encode.h).
__device__ __forceinline__ uint8_t E4m3fnCode(float y) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint8_t>(sm80::F32x2ToE4m3fnX2(y, 0.f) & 0xFF);
#else
  return static_cast<uint8_t>(FloatToE4m3fn(y));
#endif
}

// The code of y in the args' format, and the format's largest value.
__device__ __forceinline__ uint8_t CodeOf(const QuantizeArgs& a, float y) {
  return a.fnuz ? static_cast<uint8_t>(FloatToE4m3fnuz(y)) : E4m3fnCode(y);
}
__device__ __forceinline__ float Fp8MaxOf(const QuantizeArgs& a) { return a.fnuz ? 240.f : 448.f; }

__device__ __forceinline__ float Bf16(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }

__device__ __forceinline__ int HeadOf(const QuantizeArgs& a, int64_t row) {
  if (!a.per_head) return 0;
  if (a.bshd) {  // row = (b*S + s)*H + h
    const int64_t h = row % a.heads, b = row / (static_cast<int64_t>(a.seq) * a.heads);
    return static_cast<int>(b * a.heads + h);
  }
  return static_cast<int>(row / a.seq);  // row = (b*H + h)*S + s
}

// Normalized Walsh-Hadamard of kN (64 or 128) values spread over a row's
// lanes, kPer consecutive values per lane, in fp64 (exact sums of bf16
// inputs), scaled by 1/sqrt(kN) once.
template <int kPer, int kN>
__device__ __forceinline__ void RowHadamard(double (&x)[kPer], int lane) {
  for (int len = 1; len < kPer; len <<= 1) {
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      if ((i & len) == 0) {
        const double a = x[i], b = x[i + len];
        x[i] = a + b;
        x[i + len] = a - b;
      }
    }
  }
  for (int len = kPer; len < kN; len <<= 1) {
    const int lane_bit = len / kPer;
    const bool upper = (lane & lane_bit) != 0;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const double other = ShflXor(x[i], lane_bit);
      x[i] = upper ? other - x[i] : x[i] + other;
    }
  }
  const double s = HadamardScale<kN>::kValue;
#pragma unroll
  for (int i = 0; i < kPer; ++i) x[i] *= s;
}

// Non-negative floats order like their bits: an integer max is exact and
// independent of the order of the atomics. NaN never wins (as in numerics).
__device__ __forceinline__ void FlushAmax(const QuantizeArgs& a, int head, float m, int lane) {
  if (lane == 0 && head >= 0 && m > 0.f) atomicMax(a.amax + head, __float_as_uint(m));
}

// kRowLanes lanes per row: optional rotation, amax. Each row group takes a
// contiguous run of rows and keeps its maximum until the head changes, so a
// per-tensor amax costs one atomic per group, not one per row (all rows'
// atomics on one word serialize).
__global__ void AmaxKernel(const QuantizeArgs a) {
  const int lane = threadIdx.x & (kRowLanes - 1);
  const int64_t groups = static_cast<int64_t>(gridDim.x) * (blockDim.x / kRowLanes);
  const int64_t group = blockIdx.x * static_cast<int64_t>(blockDim.x / kRowLanes) + threadIdx.x / kRowLanes;
  const int64_t per_group = (a.rows + groups - 1) / groups;
  const int64_t row_end = min(a.rows, (group + 1) * per_group);
  int head = -1;
  float head_max = 0.f;
  for (int64_t row = group * per_group; row < row_end; ++row) {
    const uint16_t* x = a.x + row * a.dim;
    float m = 0.f;
    if (a.hadamard) {
      float* out = a.rotated + row * a.dim;
      // First 128 (or 64) values: 4 (or 2) per lane.
      const int n1 = a.dim >= 128 ? 128 : a.dim;
      if (n1 == 128) {
        double v[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) v[i] = Bf16(x[lane * 4 + i]);
        RowHadamard<4, 128>(v, lane);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float f = static_cast<float>(v[i]);
          out[lane * 4 + i] = f;
          m = fmaxf(m, fabsf(f));
        }
      }
      if (a.dim == 64 || a.dim == 192) {
        const int off = a.dim == 192 ? 128 : 0;
        double v[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) v[i] = Bf16(x[off + lane * 2 + i]);
        RowHadamard<2, 64>(v, lane);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const float f = static_cast<float>(v[i]);
          out[off + lane * 2 + i] = f;
          m = fmaxf(m, fabsf(f));
        }
      }
    } else {
      for (int i = lane; i < a.dim; i += kRowLanes) m = fmaxf(m, fabsf(Bf16(x[i])));
    }
#pragma unroll
    for (int o = kRowLanes / 2; o > 0; o >>= 1) m = fmaxf(m, ShflXor(m, o));
    const int h = HeadOf(a, row);
    if (h != head) {
      FlushAmax(a, head, head_max, lane);
      head = h;
      head_max = 0.f;
    }
    head_max = fmaxf(head_max, m);
  }
  FlushAmax(a, head, head_max, lane);
}

// kRowLanes lanes per row, so that the row's head and descale are found once
// per row rather than by 64-bit divisions per element.
__global__ void QuantizeKernel(const QuantizeArgs a) {
  const int lane = threadIdx.x & (kRowLanes - 1);
  const int64_t groups = static_cast<int64_t>(gridDim.x) * (blockDim.x / kRowLanes);
  for (int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / kRowLanes) + threadIdx.x / kRowLanes;
       row < a.rows; row += groups) {
    const float amax = __uint_as_float(a.amax[HeadOf(a, row)]);
    const float descale = amax == 0.f ? 1.f : __fdiv_rn(amax, Fp8MaxOf(a));
    const int64_t base = row * a.dim;
    for (int c = lane; c < a.dim; c += kRowLanes) {
      const float x = a.hadamard ? a.rotated[base + c] : Bf16(a.x[base + c]);
      a.codes[base + c] = CodeOf(a, __fdiv_rn(x, descale));
    }
  }
}

__global__ void DescaleKernel(const QuantizeArgs a) {
  const int n = a.batch * a.heads;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const float amax = __uint_as_float(a.amax[a.per_head ? i : 0]);
    a.descale[i] = amax == 0.f ? 1.f : __fdiv_rn(amax, Fp8MaxOf(a));
  }
}

#if !(defined(__HIP__) || defined(__HIP_PLATFORM_AMD__))
// CUDA only (gfx942's matrix unit reads e4m3fnuz itself).
// Through a 256-entry table in shared memory (one load per code instead of
// the encoder's bit arithmetic); four codes per thread when both pointers are
// 4-byte aligned, else one. Blocks of 256 threads.
__global__ void FnuzToFnKernel(const uint8_t* in, uint8_t* out, int64_t n) {
  __shared__ uint8_t lut[256];
  lut[threadIdx.x] = static_cast<uint8_t>(E4m3fnuzToE4m3fn(threadIdx.x));
  __syncthreads();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  int64_t done = 0;
  if (((reinterpret_cast<uintptr_t>(in) | reinterpret_cast<uintptr_t>(out)) & 3) == 0) {
    const int64_t words = n / 4;
    for (int64_t i = first; i < words; i += stride) {
      const uint32_t w = reinterpret_cast<const uint32_t*>(in)[i];
      reinterpret_cast<uint32_t*>(out)[i] = lut[w & 0xFF] | lut[(w >> 8) & 0xFF] << 8 |
                                            lut[(w >> 16) & 0xFF] << 16 | static_cast<uint32_t>(lut[w >> 24]) << 24;
    }
    done = words * 4;
  }
  for (int64_t i = done + first; i < n; i += stride) out[i] = lut[in[i]];
}
#endif

}  // namespace

#if !(defined(__HIP__) || defined(__HIP_PLATFORM_AMD__))
cudaError_t LaunchFnuzToFn(const uint8_t* in, uint8_t* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const int blocks = static_cast<int>(std::min<int64_t>((n / 4 + 255) / 256 + 1, 132 * 32));
  FnuzToFnKernel<<<blocks, 256, 0, stream>>>(in, out, n);  // 256: one table entry per thread
  return cudaGetLastError();
}
#endif

cudaError_t LaunchQuantize(const QuantizeArgs& a, cudaStream_t stream) {
  const QuantizeGrids g = QuantizeGridsOf(a);
  AmaxKernel<<<g.amax, kQuantizeThreads, 0, stream>>>(a);
  QuantizeKernel<<<g.quantize, kQuantizeThreads, 0, stream>>>(a);
  DescaleKernel<<<g.descale, kQuantizeThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace fp8_attention
}  // namespace gpu
}  // namespace kernelserve
