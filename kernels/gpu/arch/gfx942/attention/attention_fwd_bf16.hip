// bf16 MHA forward for gfx942 (MI300X), head_dim 128, on
// v_mfma_f32_16x16x16bf16_1k: BSHD and BHSD natively (strides), causal with
// the bottom-right aligned mask, GQA, any seq_q and seq_kv, the output
// rounded once in RTNE, RTNA or RTZ. One CTA = 64 query rows of one head,
// four waves of 16 rows; K and V go through LDS 16 tokens at a time,
// double-buffered, one barrier per tile.
//
// This is the plain design, not the seed's 8-wave warp-specialized CTA with
// the dense-tail KV split: the table entry says so, and the seed's kernel is
// one more entry when written.
//
// As in the gfx942 MLA kernel, the scores are computed transposed
// (S^T = K Q^T) so the MFMA's result layout is the A-operand layout of P V:
// the probabilities never pass through LDS.
//
// Occupancy (checked on the code object by attention_gfx942_hip_test): LDS
// is 17408 bytes per CTA, so three CTAs fit a CU's 64 KiB: three waves per
// SIMD. Registers are kept within that: Q in registers (8 k-steps x 4 bf16
// = 16 VGPRs), O 8 tiles x 4 fp32 = 32, VGPR + AGPR <= 168 per lane (a third
// of the 512-entry unified file, in 8-register granules). No scratch.
#include <cstdint>

#include "kernels/gpu/arch/gfx942/attention/attention_gfx942_launch.h"
#include "kernels/gpu/arch/gfx942/mfma.h"
#include "kernels/gpu/attention/flash_params.h"
#include "kernels/gpu/attention/tile_scheduler.h"
#include "kernels/gpu/common/bf16.cuh"
#include "kernels/gpu/common/gpu.h"

namespace kernelserve {
namespace gpu {
namespace attention {
namespace gfx942 {

using gpu::gfx942::Bf16x4;
using gpu::gfx942::F32x4;
using gpu::gfx942::LaneValue;
using gpu::gfx942::Mfma;
using gpu::gfx942::RowMax;
using gpu::gfx942::RowSum;


constexpr int kKSteps = kHeadDim / 16;  // 8
constexpr int kNTiles = kHeadDim / 16;  // 8
constexpr int kTileBytes = kTileTok * kRowBytes;
static_assert(kLdsBytes == 4 * kTileBytes, "K and V, two buffers each");
constexpr int kPieces = kTileTok * kHeadDim * 2 / 16;  // 16-byte pieces of a K (or V) tile: 256

struct TileRegs {
  uint4 k, v;
};

// Thread t loads piece t of the K tile and of the V tile (zeros past seq_kv).
__device__ __forceinline__ void LoadTile(const FlashFwdParams& p, const uint16_t* kb, const uint16_t* vb, int j0,
                                         TileRegs& r) {
  const int tok = threadIdx.x / (kHeadDim / 8), c = threadIdx.x % (kHeadDim / 8);
  r.k = make_uint4(0u, 0u, 0u, 0u);
  r.v = make_uint4(0u, 0u, 0u, 0u);
  if (j0 + tok < p.seq_kv) {
    r.k = *reinterpret_cast<const uint4*>(kb + static_cast<int64_t>(j0 + tok) * p.k_row_stride + c * 8);
    r.v = *reinterpret_cast<const uint4*>(vb + static_cast<int64_t>(j0 + tok) * p.v_row_stride + c * 8);
  }
}

__device__ __forceinline__ void StoreTile(uint8_t* buf, const TileRegs& r) {
  const int tok = threadIdx.x / (kHeadDim / 8), c = threadIdx.x % (kHeadDim / 8);
  *reinterpret_cast<uint4*>(buf + tok * kRowBytes + c * 16) = r.k;
  *reinterpret_cast<uint4*>(buf + kTileBytes + tok * kRowBytes + c * 16) = r.v;
}

template <bool kCausal>
__device__ __forceinline__ void FwdCta(const FlashFwdParams& p) {
  static_assert(kPieces == kThreads, "one piece of K and one of V per thread per tile");
  __shared__ __attribute__((aligned(16))) uint8_t lds[kLdsBytes];
  const int qb = blockIdx.x, h = blockIdx.y, b = blockIdx.z, hk = h / p.group;
  const int lane = threadIdx.x & 63, wave = threadIdx.x >> 6;
  const int lr = lane & 15, lq = lane >> 4;
  const uint16_t* qh = static_cast<const uint16_t*>(p.q) + b * p.q_batch_stride + h * p.q_head_stride;
  const uint16_t* kb = static_cast<const uint16_t*>(p.k) + b * p.k_batch_stride + hk * p.k_head_stride;
  const uint16_t* vb = static_cast<const uint16_t*>(p.v) + b * p.v_batch_stride + hk * p.v_head_stride;

  // Query row of this lane's statistics (B operand of S^T: row lr, d = 16 ks + 4 lq + i).
  const int row = qb * kRows + wave * 16 + lr;
  const bool live = row < p.seq_q;
  const int last = !live ? -1 : kCausal ? row + p.causal_offset : p.seq_kv - 1;  // last key this row sees
  Bf16x4 q[kKSteps];
#pragma unroll
  for (int ks = 0; ks < kKSteps; ++ks) {
    q[ks] = live ? *reinterpret_cast<const Bf16x4*>(qh + static_cast<int64_t>(row) * p.q_row_stride + ks * 16 + lq * 4)
                 : Bf16x4{0, 0, 0, 0};
  }

  // Keys this CTA visits: all of them, or (causal) those up to its last row's limit.
  const int n_tiles = KvBlocks(p.seq_kv, qb * kRows, kRows, kTileTok, p.causal_offset, kCausal);

  F32x4 acc[kNTiles];
#pragma unroll
  for (int n = 0; n < kNTiles; ++n) acc[n] = F32x4{0.f, 0.f, 0.f, 0.f};
  float m = -INFINITY, l = 0.f;

  TileRegs next;
  if (n_tiles > 0) {
    LoadTile(p, kb, vb, 0, next);
    StoreTile(lds, next);
  }
  __syncthreads();
  for (int it = 0; it < n_tiles; ++it) {
    const int j0 = it * kTileTok;
    const bool more = it + 1 < n_tiles;
    if (more) LoadTile(p, kb, vb, j0 + kTileTok, next);
    const uint8_t* kt = lds + (it & 1) * 2 * kTileBytes;
    const uint8_t* vt = kt + kTileBytes;

    F32x4 s = F32x4{0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      const Bf16x4 kv = *reinterpret_cast<const Bf16x4*>(kt + lr * kRowBytes + (ks * 16 + lq * 4) * 2);
      s = Mfma(kv, q[ks], s);
    }
    float v[4], tmax = -INFINITY;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int j = j0 + lq * 4 + i;
      v[i] = (j < p.seq_kv && j <= last) ? s[i] * p.scale_log2 : -INFINITY;
      tmax = fmaxf(tmax, v[i]);
    }
    const float mn = fmaxf(m, RowMax(tmax));
    const float m_use = mn == -INFINITY ? 0.f : mn;
    const float alpha = Exp2Approx(m - m_use);
    m = mn;
    float psum = 0.f;
    Bf16x4 pa;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t bits = FloatToBf16Bits(Exp2Approx(v[i] - m_use), kRoundRtne);
      psum += __uint_as_float(bits << 16);
      pa[i] = static_cast<short>(bits);
    }
    l = l * alpha + RowSum(psum);
    float a_row[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) a_row[i] = LaneValue(alpha, lq * 4 + i);
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[n][i] *= a_row[i];
      // V[token 4 lq + i][d 16 n + lr].
      const uint16_t* col = reinterpret_cast<const uint16_t*>(vt + lq * 4 * kRowBytes) + n * 16 + lr;
      Bf16x4 vv;
#pragma unroll
      for (int i = 0; i < 4; ++i) vv[i] = static_cast<short>(col[i * (kRowBytes / 2)]);
      acc[n] = Mfma(pa, vv, acc[n]);
    }
    if (more) StoreTile(lds + ((it + 1) & 1) * 2 * kTileBytes, next);
    __syncthreads();
  }

  // This lane holds O[row 4 lq + i of the wave][d 16 n + lr]; a row that
  // sees no key (causal, seq_q > seq_kv) is 0, as the oracle's.
  uint16_t* oh = static_cast<uint16_t*>(p.o) + b * p.o_batch_stride + h * p.o_head_stride;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float l_r = LaneValue(l, lq * 4 + i);
    const int orow = qb * kRows + wave * 16 + lq * 4 + i;
    if (orow >= p.seq_q) continue;
    const float inv = l_r > 0.f ? 1.f / l_r : 0.f;
    uint16_t* o = oh + static_cast<int64_t>(orow) * p.o_row_stride + lr;
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) o[n * 16] = static_cast<uint16_t>(FloatToBf16Bits(acc[n][i] * inv, p.rounding));
  }
}

}  // namespace gfx942
}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve

// C names for hipModuleGetFunction, causal or not; three waves per SIMD is
// the occupancy stated above.
#define KS_ATTENTION_GFX942(NAME, CAUSAL)                                                               \
  extern "C" __global__ void __attribute__((amdgpu_flat_work_group_size(256, 256), amdgpu_waves_per_eu(3))) \
  NAME(const kernelserve::gpu::attention::FlashFwdParams p) {                                           \
    kernelserve::gpu::attention::gfx942::FwdCta<CAUSAL>(p);                                             \
  }
KS_ATTENTION_GFX942(KsAttentionFwdBf16Gfx942, false)
KS_ATTENTION_GFX942(KsAttentionFwdBf16CausalGfx942, true)
#undef KS_ATTENTION_GFX942
