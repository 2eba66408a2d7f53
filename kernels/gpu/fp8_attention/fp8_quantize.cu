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

// Two e4m3fn codes, lo's in bits 0-7 and hi's in bits 8-15.
__device__ __forceinline__ uint32_t E4m3fnPair(float lo, float hi) {
#if defined(__CUDA_ARCH__)
  return sm80::F32x2ToE4m3fnX2(lo, hi);
#else
  return FloatToE4m3fn(lo) | FloatToE4m3fn(hi) << 8;
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
// The per-tensor, unrotated case (the default) as two streaming passes over
// the flat tensor, eight elements a thread step (16-byte loads of bf16,
// 8-byte stores of codes), CUDA only: the row kernels above read two bytes
// per lane and write one, and a 128 MiB tensor took ~4x its bytes' time.
// The amax is a block's maximum in one atomic; the codes are the row
// kernels' (the same division, the same encoder), so either path gives the
// same bytes.
constexpr int kVecThreads = 256;

__device__ __forceinline__ float AbsMax8(const uint4 v, float m) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    m = fmaxf(m, fabsf(__uint_as_float(w[i] << 16)));
    m = fmaxf(m, fabsf(__uint_as_float(w[i] & 0xFFFF0000u)));
  }
  return m;
}

__global__ void __launch_bounds__(kVecThreads) AmaxVecKernel(const uint4* x, int64_t n8, unsigned int* amax) {
  float m = 0.f;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kVecThreads;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kVecThreads) + threadIdx.x; i < n8; i += stride) {
    m = AbsMax8(x[i], m);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  __shared__ float warp_max[kVecThreads / 32];
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kVecThreads / 32; ++w) m = fmaxf(m, warp_max[w]);
    if (m > 0.f) atomicMax(amax, __float_as_uint(m));
  }
}

__global__ void __launch_bounds__(kVecThreads) QuantizeVecKernel(const QuantizeArgs a, int64_t n8) {
  const float amax = __uint_as_float(a.amax[0]);
  const float descale = amax == 0.f ? 1.f : __fdiv_rn(amax, Fp8MaxOf(a));
  const uint4* x = reinterpret_cast<const uint4*>(a.x);
  uint2* codes = reinterpret_cast<uint2*>(a.codes);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kVecThreads;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kVecThreads) + threadIdx.x; i < n8; i += stride) {
    const uint4 v = x[i];
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
    uint32_t out[2] = {0u, 0u};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float lo = __fdiv_rn(__uint_as_float(w[j] << 16), descale);
      const float hi = __fdiv_rn(__uint_as_float(w[j] & 0xFFFF0000u), descale);
      const uint32_t pair = a.fnuz ? (static_cast<uint32_t>(FloatToE4m3fnuz(lo)) |
                                      static_cast<uint32_t>(FloatToE4m3fnuz(hi)) << 8)
                                   : E4m3fnPair(lo, hi);
      out[j >> 1] |= pair << (16 * (j & 1));
    }
    codes[i] = make_uint2(out[0], out[1]);
  }
}

// The vector path's conditions: per tensor, no rotation, 16-byte aligned
// input and 8-byte aligned codes (rows of 64, 128 or 192 elements keep the
// flat tensor a multiple of 8).
bool VecQuantizeApplies(const QuantizeArgs& a) {
  return !a.hadamard && !a.per_head && a.dim % 8 == 0 && (reinterpret_cast<uintptr_t>(a.x) & 15) == 0 &&
         (reinterpret_cast<uintptr_t>(a.codes) & 7) == 0;
}
#endif

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
#if !(defined(__HIP__) || defined(__HIP_PLATFORM_AMD__))
  if (VecQuantizeApplies(a)) {
    const int64_t n8 = a.rows * a.dim / 8;
    // A few resident blocks per SM stream the tensor; more only add atomics.
    const int blocks = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((n8 + kVecThreads - 1) / kVecThreads, 132 * 8)));
    AmaxVecKernel<<<blocks, kVecThreads, 0, stream>>>(reinterpret_cast<const uint4*>(a.x), n8, a.amax);
    QuantizeVecKernel<<<blocks, kVecThreads, 0, stream>>>(a, n8);
    DescaleKernel<<<g.descale, kQuantizeThreads, 0, stream>>>(a);
    return cudaGetLastError();
  }
#endif
  AmaxKernel<<<g.amax, kQuantizeThreads, 0, stream>>>(a);
  QuantizeKernel<<<g.quantize, kQuantizeThreads, 0, stream>>>(a);
  DescaleKernel<<<g.descale, kQuantizeThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace fp8_attention
}  // namespace gpu
}  // namespace kernelserve
