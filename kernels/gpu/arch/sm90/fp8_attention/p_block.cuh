// Device pieces shared by the FP8 attention kernels: the row offset of a
// BHSD/BSHD tensor, and ZYFA's per-64-key-block P frame (DESIGN §4), so that
// the numerics are written once: for the two query rows a thread holds, a
// block's power-of-two reference R = ceil(max t) - 8, the factor that moves
// the accumulators into it, and dropped blocks. Naive P's frame relies on
// CUDA's exp2f (exact at integers), which the AMD build (no device math
// library) lacks; exact and lean P build their powers of two from exponent
// bits (Pow2Int).
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM90_FP8_ATTENTION_P_BLOCK_CUH_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM90_FP8_ATTENTION_P_BLOCK_CUH_

#include <math.h>

#include <cstdint>

namespace kernelserve {
namespace gpu {
namespace fp8_attention {

// Element offset of row s of head h of batch b in a [B,H,S,D] (or, bshd,
// [B,S,H,D]) tensor of head dim d.
__device__ __forceinline__ int64_t RowOff(int bshd, int64_t b, int64_t h, int64_t s, int64_t heads, int64_t seq,
                                          int64_t d) {
  return bshd ? ((b * seq + s) * heads + h) * d : ((b * heads + h) * seq + s) * d;
}

// P modes (PMode's values), as the kernels' template argument.
constexpr int kExact = 1, kLean = 2, kNaive = 3;

// 2^d for an integer d <= 127, built from its exponent bits (0 below 2^-126):
// two integer operations where exp2f of a converted integer is a float
// conversion and a MUFU.EX2 on the frame's dependency chain. It differs from
// exp2f only for d in [-149, -127], a frame change so large that the scaled
// accumulators lie under fp32 precision of the new block's.
__device__ __forceinline__ float Pow2Int(int d) { return __int_as_float((max(d, -127) + 127) << 23); }

// From the block's row maxima `bmax` (base-2 scores; -inf: no key in the
// block): `factor` rescales the accumulators into the block's frame and
// `ref` is subtracted from the scores before encoding (+inf: every code of
// the row is 0). Exact and lean P keep the frame in r_last / r_max (a block
// more than 60 binades under the row's largest R is dropped); naive P is a
// plain running max m_run. The ceiling is one conversion (cvt.rpi: +inf
// saturates, NaN gives 0, as ceilf then a truncating conversion did).
template <int kMode>
__device__ __forceinline__ void UpdateBlockFrame(const float (&bmax)[2], float (&m_run)[2],
                                                 int (&r_last)[2], int (&r_max)[2], float (&factor)[2],
                                                 float (&ref)[2]) {
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    if (kMode == kNaive) {
      const float mn = fmaxf(m_run[hf], bmax[hf]);
      const float mu = mn == -INFINITY ? 0.f : mn;
      factor[hf] = exp2f(m_run[hf] - mu);
      m_run[hf] = mn;
      ref[hf] = mu;
    } else {
      // Wrapping subtraction: -inf converts to INT_MIN (that block is `empty`).
      const int rb = static_cast<int>(static_cast<unsigned>(__float2int_ru(bmax[hf])) - 8u);
      const bool empty = bmax[hf] == -INFINITY;      // no key of this row in the block: no change of frame
      const bool dropped = rb < r_max[hf] - 60;      // negligible block
      const bool keep = !empty && !dropped;
      factor[hf] = keep ? Pow2Int(r_last[hf] - rb) : 1.f;  // exact power of two (0 at the start)
      ref[hf] = keep ? static_cast<float>(rb) : INFINITY;  // t - inf = -inf: code 0
      r_last[hf] = keep ? rb : r_last[hf];
      r_max[hf] = keep ? max(r_max[hf], rb) : r_max[hf];
    }
  }
}

// min(max(x, lo), hi) that returns NaN for NaN x (fminf / fmaxf return the
// other operand): the canonical NaN 0x7FFFFFFF, whose low byte is e4m3fn's NaN.
__device__ __forceinline__ float ClampNan(float x, float lo, float hi) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;\n\tmin.NaN.f32 %0, %0, %3;" : "=&f"(r) : "f"(x), "f"(lo), "f"(hi));
  return r;
}

// Lean P's e4m3fn code, clamp(round_half_even(8 y + 56), 0, 120) with
// y = s * scale - R, from the raw score s by float arithmetic alone, in one
// rounding: fma(s, a, c) with a = 8 * scale and c = 1.5 * 2^23 + 56 - 8 R
// lands in [2^23, 2^24), where the fp32 spacing is 1, so the fma rounds to
// the integer code (ties to even) held in the low mantissa bits; the clamp
// runs on the biased float (-inf clamps to code 0, NaN stays NaN: code 0xFF,
// so that a NaN score makes its row NaN, as exact P's and the oracle's). A float-to-int
// conversion (F2I) issues on the same quarter-rate XU pipe as MUFU.EX2, so
// converting would cost lean P what exact P's exponential costs.
constexpr float kLeanBias = 12582912.f;  // 1.5 * 2^23: bits 0x4B400000 + code
__device__ __forceinline__ uint32_t LeanBiasedFma(float s, float a, float c) {
  return __float_as_uint(ClampNan(fmaf(s, a, c), kLeanBias, kLeanBias + 120.f));
}
// Two codes, s0's in bits 0-7 and s1's in bits 8-15 (byte 1 of a biased
// value is 0: one PRMT packs them; for a NaN s0 it is 0xFF, which can only
// add NaN codes of the same row, already NaN).
__device__ __forceinline__ uint32_t LeanCodePairFma(float s0, float s1, float a, float c) {
  return __byte_perm(LeanBiasedFma(s0, a, c), LeanBiasedFma(s1, a, c), 0x1140);
}

}  // namespace fp8_attention
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM90_FP8_ATTENTION_P_BLOCK_CUH_
