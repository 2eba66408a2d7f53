// Device pieces both gfx942 MLA decode kernels share (mla_decode_a16w8.hip,
// the window CTA; mla_decode_a16w8_pos.hip, the position CTA): the fp8
// unpack into an MFMA operand, a query row's operands, one online-softmax
// step over a 16-token S^T tile, and a V operand gathered from LDS.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_GFX942_MLA_MLA_GFX942_DEVICE_H_
#define KERNELSERVE_KERNELS_GPU_ARCH_GFX942_MLA_MLA_GFX942_DEVICE_H_

#include <cstdint>

#include "kernels/gpu/arch/gfx942/mfma.h"
#include "kernels/gpu/arch/gfx942/mla/mla_gfx942_launch.h"
#include "kernels/gpu/common/bf16.cuh"
#include "kernels/gpu/common/gpu.h"
#include "kernels/gpu/mla/mla_decode_params.h"

namespace kernelserve {
namespace gpu {
namespace mla {
namespace gfx942 {

using gpu::gfx942::Bf16x4;
using gpu::gfx942::F32x2;
using gpu::gfx942::F32x4;
using gpu::gfx942::LaneValue;
using gpu::gfx942::Mfma;
using gpu::gfx942::RowMax;
using gpu::gfx942::RowSum;

constexpr int kKSteps = kD / 16;  // 36 MFMA k-steps of S^T

// Four e4m3fnuz codes -> four bf16 (exact: an fp8 value has 4 significant
// bits, so the fp32 from v_cvt_pk_f32_fp8 truncates to bf16 without loss).
__device__ __forceinline__ Bf16x4 Fp8x4ToBf16x4(uint32_t codes) {
  const F32x2 lo = __builtin_amdgcn_cvt_pk_f32_fp8(static_cast<int>(codes), false);
  const F32x2 hi = __builtin_amdgcn_cvt_pk_f32_fp8(static_cast<int>(codes), true);
  Bf16x4 r;
  r.x = static_cast<short>(__float_as_uint(lo.x) >> 16);
  r.y = static_cast<short>(__float_as_uint(lo.y) >> 16);
  r.z = static_cast<short>(__float_as_uint(hi.x) >> 16);
  r.w = static_cast<short>(__float_as_uint(hi.y) >> 16);
  return r;
}

// Query row `r` of request b as the B operand of S^T = K Q^T, lane quarter
// lq: d = 16 ks + 4 lq + i over the 576 columns (latent, then rope); zeros
// for a row that is not live.
__device__ __forceinline__ void LoadQ(const KParams& p, int b, int r, bool live, int lq, Bf16x4 (&q)[kKSteps]) {
  const int64_t rr = static_cast<int64_t>(b) * p.rows + (live ? r : 0);
#pragma unroll
  for (int ks = 0; ks < kKSteps; ++ks) {
    const int d = ks * 16 + lq * 4;
    const uint16_t* src = d < kDL ? p.q_lat + rr * kDL + d : p.q_pe + rr * kDR + (d - kDL);
    q[ks] = live ? *reinterpret_cast<const Bf16x4*>(src) : Bf16x4{0, 0, 0, 0};
  }
}

// One online-softmax step in base 2 for row lr over 16 tokens: this lane
// holds S^T[token j0 + 4 lq + i][row lr] in `s`; tokens at tok_end or past
// `lim` (the row's last visible token) are masked. Updates the row's running
// max m (log2 units) and sum l (over the bf16-rounded probabilities, what
// the MFMA sees), returns P[row lr][token 4 lq + i] rounded to bf16 (RTNE),
// the A operand of O += P V, and sets `alpha`, the factor the row's O takes.
__device__ __forceinline__ Bf16x4 SoftmaxStep(const F32x4& s, int64_t j0, int lq, int64_t tok_end, int64_t lim,
                                              float sl2, float& m, float& l, float& alpha) {
  float v[4], tmax = -INFINITY;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t j = j0 + lq * 4 + i;
    v[i] = (j < tok_end && j <= lim) ? s[i] * sl2 : -INFINITY;
    tmax = fmaxf(tmax, v[i]);
  }
  const float mn = fmaxf(m, RowMax(tmax));
  const float m_use = mn == -INFINITY ? 0.f : mn;
  alpha = Exp2Approx(m - m_use);
  m = mn;
  float psum = 0.f;
  Bf16x4 pa;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float pi = Exp2Approx(v[i] - m_use);
    const uint32_t bits = FloatToBf16Bits(pi, kRoundRtne);
    psum += __uint_as_float(bits << 16);
    pa[i] = static_cast<short>(bits);
  }
  l = l * alpha + RowSum(psum);
  return pa;
}

// V[token 4 lq + i][column c] of a 16-token block starting at `rows` in LDS
// (rows kRowBytes apart): one byte of four rows, as the B operand of O += P V.
__device__ __forceinline__ Bf16x4 VOperand(const uint8_t* rows, int lq, int c) {
  const uint8_t* col = rows + lq * 4 * kRowBytes + c;
  return Fp8x4ToBf16x4(static_cast<uint32_t>(col[0]) | static_cast<uint32_t>(col[kRowBytes]) << 8 |
                       static_cast<uint32_t>(col[2 * kRowBytes]) << 16 |
                       static_cast<uint32_t>(col[3 * kRowBytes]) << 24);
}

}  // namespace gfx942
}  // namespace mla
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_GFX942_MLA_MLA_GFX942_DEVICE_H_
