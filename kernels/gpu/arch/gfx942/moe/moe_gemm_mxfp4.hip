// The grouped GEMM of MXFP4 MoE for gfx942 (MI300X): bf16 activations
// against E2M1 weights with one E8M0 scale per 32 k, on
// v_mfma_f32_16x16x16bf16_1k. It walks the routing's expert tiles
// (moe_params.h's GemmParams): a CTA is one 16-pair tile x 64 output columns,
// four waves of 16 columns each. Three epilogues, one kernel each: bf16 per
// pair (gate/up alone; down alone), fused SwiGLU (a wave holds both its gate
// and its up columns, so silu(gate) * up never leaves registers), fp32 per
// pair (the weighted per-token sum's input).
//
// The weights are decoded in registers into the MFMA's B operand: a lane
// needs 4 consecutive k of one weight row, i.e. 2 bytes of nibbles, and the
// scale of their 32-k block; E2M1 x 2^(e-127) is exact in bf16 (2
// significant bits, bf16's exponent range). Activations are read straight
// into the A operand (8 bytes per lane per k-step). No LDS: each weight byte
// is read by one lane of one CTA per column block, and decode's arithmetic,
// not a second read, is the cost that sharing through LDS would not remove.
//
// Occupancy (checked on the code object by moe_gfx942_hip_test): two
// accumulators of 4 fp32 and one k-step's operands; VGPR + AGPR <= 64 per
// lane, so eight waves per SIMD (the most a gfx942 SIMD holds), which is what
// hides the global loads' latency here. No scratch, no LDS.
#include <cstdint>

#include "kernels/gpu/arch/gfx942/mfma.h"
#include "kernels/gpu/arch/gfx942/moe/moe_gfx942_launch.h"
#include "kernels/gpu/common/bf16.cuh"
#include "kernels/gpu/common/gpu.h"
#include "kernels/gpu/moe/moe_params.h"

namespace kernelserve {
namespace gpu {
namespace moe {
namespace gfx942 {

using gpu::gfx942::Bf16x4;
using gpu::gfx942::F32x4;
using gpu::gfx942::Mfma;


// E2M1 magnitude codes 0..7 as bf16: 0, 0.5, 1, 1.5, 2, 3, 4, 6.
__device__ __forceinline__ uint32_t E2m1Bf16(uint32_t code) {
  const uint32_t mag = code & 7u;
  // Exponent/mantissa of 0.5..6 follow the code: 1 + code/2 binades above 0.5, the low bit the mantissa.
  const uint32_t bits = mag == 0 ? 0u : mag == 1 ? 0x3F00u : (0x3F80u + ((mag - 2) >> 1 << 7) + ((mag & 1) << 6));
  return bits | ((code & 8u) << 12);
}

// 2^(e - 127) as fp32: e = 0 is the subnormal 2^-127, e = 255 NaN.
__device__ __forceinline__ float E8m0(uint32_t e) {
  return e == 0 ? __uint_as_float(0x00400000u) : e == 255 ? __uint_as_float(0x7FC00000u) : __uint_as_float(e << 23);
}

// Four E2M1 codes (two bytes, element 2i in the low nibble of byte i) scaled
// by `scale` -> the B operand's four bf16.
__device__ __forceinline__ Bf16x4 DecodeFp4x4(uint32_t two_bytes, float scale) {
  Bf16x4 r;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float v = __uint_as_float(E2m1Bf16((two_bytes >> (4 * i)) & 0xFu) << 16) * scale;
    r[i] = static_cast<short>(__float_as_uint(v) >> 16);  // exact: see above
  }
  return r;
}

// B operand of weight row `n` (of expert `e`) at k = k0 + 4 lq .. + 3.
__device__ __forceinline__ Bf16x4 WeightOperand(const GemmParams& p, int64_t row, int64_t k) {
  const uint8_t* w = p.w + row * (p.k / 2) + k / 2;
  const uint32_t two = static_cast<uint32_t>(w[0]) | static_cast<uint32_t>(w[1]) << 8;
  return DecodeFp4x4(two, E8m0(p.ws[row * (p.k / 32) + k / 32]));
}

template <int kEpi>
__device__ __forceinline__ void GemmCta(const GemmParams& p) {
  const int tile = blockIdx.y;
  if (tile >= *p.num_tiles) return;
  const int lane = threadIdx.x & 63, wave = threadIdx.x >> 6;
  const int lr = lane & 15, lq = lane >> 4;
  const int64_t e = p.tile_expert[tile];
  const int col = blockIdx.x * kCtaCols + wave * 16 + lr;  // this lane's B column (output column)
  const bool col_ok = col < p.out_cols;

  // A operand: pair row lr of the tile.
  const int pair = p.sorted[tile * kTileRows + lr];
  const uint16_t* a = pair >= 0 ? p.a + static_cast<int64_t>(pair / p.a_row_div) * p.k : nullptr;
  // B rows: the output column's weight row (SwiGLU: its gate row, and its up row at + inter).
  const int64_t w_row = e * p.nw + (col_ok ? col : 0);

  F32x4 acc = F32x4{0.f, 0.f, 0.f, 0.f}, acc_up = F32x4{0.f, 0.f, 0.f, 0.f};
  for (int64_t k0 = 0; k0 < p.k; k0 += 16) {
    const int64_t k = k0 + lq * 4;
    const Bf16x4 av = a != nullptr ? *reinterpret_cast<const Bf16x4*>(a + k) : Bf16x4{0, 0, 0, 0};
    const Bf16x4 bv = col_ok ? WeightOperand(p, w_row, k) : Bf16x4{0, 0, 0, 0};
    acc = Mfma(av, bv, acc);
    if (kEpi == kEpiSwiglu) {
      const Bf16x4 uv = col_ok ? WeightOperand(p, w_row + p.inter, k) : Bf16x4{0, 0, 0, 0};
      acc_up = Mfma(av, uv, acc_up);
    }
  }

  // This lane holds rows 4 lq + i of the tile, column `col`.
  if (!col_ok) return;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int out_pair = p.sorted[tile * kTileRows + lq * 4 + i];
    if (out_pair < 0) continue;
    const int64_t at = static_cast<int64_t>(out_pair) * p.out_cols + col;
    if (kEpi == kEpiF32) {
      static_cast<float*>(p.out)[at] = acc[i];
    } else {
      float v = acc[i];
      if (kEpi == kEpiSwiglu) v = v / (1.f + Exp2Approx(-v * 1.4426950408889634f)) * acc_up[i];
      static_cast<uint16_t*>(p.out)[at] = static_cast<uint16_t>(FloatToBf16Bits(v, p.rounding));
    }
  }
}

}  // namespace gfx942
}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve

// C names: the host finds them with hipModuleGetFunction. Eight waves per
// SIMD is the register budget the comment above states.
#define KS_MOE_GFX942_GEMM(NAME, EPI)                                                                  \
  extern "C" __global__ void __attribute__((amdgpu_flat_work_group_size(256, 256), amdgpu_waves_per_eu(8))) \
  NAME(const kernelserve::gpu::moe::GemmParams p) {                                                    \
    kernelserve::gpu::moe::gfx942::GemmCta<EPI>(p);                                                    \
  }
KS_MOE_GFX942_GEMM(KsMoeGemmMxfp4Gfx942Bf16, kernelserve::gpu::moe::kEpiBf16)
KS_MOE_GFX942_GEMM(KsMoeGemmMxfp4Gfx942Swiglu, kernelserve::gpu::moe::kEpiSwiglu)
KS_MOE_GFX942_GEMM(KsMoeGemmMxfp4Gfx942F32, kernelserve::gpu::moe::kEpiF32)
#undef KS_MOE_GFX942_GEMM
