// bf16 MHA forward for gfx942 (MI300X), head_dim 128, on
// v_mfma_f32_16x16x16bf16_1k: BSHD and BHSD natively (strides), causal with
// the bottom-right aligned mask, GQA, any seq_q and seq_kv, the output
// rounded once in RTNE, RTNA or RTZ (DESIGN §4). Compiled, never run: no
// AMD GPU exists on the project's machines.
//
// The seed's CTA shape: eight waves, each owning its own three 16-row query
// tiles (48 rows, 384 per CTA) with their own softmax state; waves do not
// share query rows, so the only CTA-wide step is the K tile they all read.
// Every wave computes: the waves are specialized by the rows they own, not
// into producers and consumers (no wave only loads; each of the 512 threads
// loads one 16-byte piece of every K tile).
// Of a wave's three Q tiles two are parked in registers and the third is
// staged once in the wave's slice of LDS and re-read per k-step: a register Q
// tile is 16 VGPRs, and that third one is what keeps the wave at 256 (below).
// K streams global -> LDS, 32 keys per tile, double-buffered: each thread
// issues one 16-byte buffer load of tile t + 1 before tile t's MFMAs and
// writes it to the other buffer after them, one barrier per tile. The loads
// go through a buffer resource bounded at the head's last K row, so keys past
// seq_kv read as zeros from the hardware (no padding, no bounds branch). V is
// consumed pre-transposed (KsAttentionVTransposeGfx942 writes V^T, zero past
// seq_kv, into the launch's workspace): P V's B operand is four consecutive
// keys of one column, one 8-byte load from global memory per MFMA, the same
// addresses for all eight waves, so seven of them read it from L1.
//
// Where this differs from the seed: the seed fills LDS with K by direct DMA
// (global_load_lds); Debian's clang-19 crashes in its post-RA scheduler on
// __builtin_amdgcn_global_load_lds, so K goes through a VGPR on its way.
//
// As in the gfx942 MLA kernel, scores are computed transposed (S^T = K Q^T):
// the MFMA's result layout is then the A-operand layout of P V, so the
// probabilities never pass through LDS. Scores in base 2, P rounded to bf16
// (RTNE) for the MFMA and the row sum taken over the rounded values.
//
// The dense-tail KV split (attention_gfx942_launch.h's PlanDenseTail): CTA
// b < full_items runs work item b whole; the others run chunk s of tail item
// t's K tiles and leave fp32 (m, l, O) for KsAttentionMergeGfx942.
//
// Occupancy (checked on the code object by attention_gfx942_hip_test): LDS
// is 52224 bytes (two K tiles and eight staged Q tiles), so one CTA per CU:
// eight waves over four SIMDs, two per SIMD, so VGPR + AGPR <= 256 per lane
// (half of the 512-entry unified file). In registers: O 3 x 8 tiles x 4 fp32
// = 96, Q 2 x 16 = 32, a 16-key block's V^T operands 16, S^T 4. No
// scratch.
#include <cstdint>

#include "kernels/gpu/arch/gfx942/attention/attention_gfx942_launch.h"
#include "kernels/gpu/arch/gfx942/mfma.h"
#include "kernels/gpu/attention/flash_params.h"
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
constexpr int kSub = kTileTok / 16;     // 16-key softmax steps per K tile: 2
constexpr int kRegQTiles = 2;           // Q tiles held in registers; the third is staged in LDS
static_assert(kQTilesPerWave == kRegQTiles + 1, "two register Q tiles and one staged");
static_assert(kTileTok * kHeadDim * 2 / 16 == kThreads, "one 16-byte piece of a K tile per thread");
static_assert(kLdsBytes == 2 * kKTileBytes + kQStageBytes, "the LDS map below");

typedef unsigned U32x4 __attribute__((ext_vector_type(4)));

// Buffer resource word 3 on gfx9: 32-bit data format, raw (unswizzled) access.
constexpr int kBufferWord3 = 0x00020000;

struct KStream {
  __amdgpu_buffer_rsrc_t rsrc;
  int row_bytes;  // k_row_stride in bytes
};

__device__ __forceinline__ KStream MakeKStream(const FlashFwdParams& p, const uint16_t* kb) {
  // Bytes up to the end of the head's last K row (Unsupported keeps it 31-bit).
  const int bytes = static_cast<int>(((p.seq_kv - 1) * p.k_row_stride + kHeadDim) * 2);
  return KStream{__builtin_amdgcn_make_buffer_rsrc(const_cast<uint16_t*>(kb), 0, bytes, kBufferWord3),
                 static_cast<int>(p.k_row_stride * 2)};
}

// Thread t's piece of the K tile of keys [j0, j0 + kTileTok): key t / 16,
// bytes 16 (t % 16) of its row; zeros past seq_kv (out of the resource).
__device__ __forceinline__ U32x4 LoadK(const KStream& ks, int j0) {
  const int tok = threadIdx.x >> 4, c = threadIdx.x & 15;
  return __builtin_amdgcn_raw_buffer_load_b128(ks.rsrc, (j0 + tok) * ks.row_bytes + c * 16, 0, 0);
}

__device__ __forceinline__ void StoreK(uint8_t* tile, U32x4 v) {
  const int tok = threadIdx.x >> 4, c = threadIdx.x & 15;
  *reinterpret_cast<U32x4*>(tile + tok * kRowBytes + c * 16) = v;
}

// V^T[d 16 n + lr][key j + 4 lq + i] for the eight column tiles n, at byte
// offset voff of key j: one VGPR offset for all eight loads (the column
// tile's offset is uniform, an SGPR).
__device__ __forceinline__ void LoadVt(__amdgpu_buffer_rsrc_t rsrc, int voff, int vt_len, Bf16x4 (&vv)[kNTiles]) {
#pragma unroll
  for (int n = 0; n < kNTiles; ++n) {
    vv[n] = __builtin_bit_cast(Bf16x4, __builtin_amdgcn_raw_buffer_load_b64(rsrc, voff, n * 16 * vt_len * 2, 0));
  }
}

// One Q tile's online softmax over the 16 keys at j0 and its P V: s holds
// S^T[key j0 + 4 lq + i][row lr]; `last` is the last key row lr sees.
__device__ __forceinline__ void SoftmaxPv(const FlashFwdParams& p, F32x4 s, int j0, int last,
                                          const Bf16x4 (&vv)[kNTiles], float& m, float& l, F32x4 (&acc)[kNTiles]) {
  const int lq = (threadIdx.x & 63) >> 4;
  float t[4], tmax = -INFINITY;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    t[i] = j0 + lq * 4 + i <= last ? s[i] * p.scale_log2 : -INFINITY;
    tmax = fmaxf(tmax, t[i]);
  }
  const float mn = fmaxf(m, RowMax(tmax));
  const float m_use = mn == -INFINITY ? 0.f : mn;
  const float alpha = Exp2Approx(m - m_use);
  m = mn;
  float psum = 0.f;
  Bf16x4 pa;  // P[row lr][key 4 lq + i]: the A operand of O += P V
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t bits = FloatToBf16Bits(Exp2Approx(t[i] - m_use), kRoundRtne);
    psum += __uint_as_float(bits << 16);  // the sum of the probabilities the MFMA sees
    pa[i] = static_cast<short>(bits);
  }
  l = l * alpha + RowSum(psum);
  // O rows 4 lq + i take their row's alpha from a lane of that row.
  float a_row[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) a_row[i] = LaneValue(alpha, lq * 4 + i);
#pragma unroll
  for (int n = 0; n < kNTiles; ++n) {
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[n][i] *= a_row[i];
    acc[n] = Mfma(pa, vv[n], acc[n]);
  }
}

template <bool kCausal>
__device__ __forceinline__ void FwdCta(const Gfx942AttnParams& ap) {
  const FlashFwdParams& p = ap.f;
  __shared__ __attribute__((aligned(16))) uint8_t lds[kLdsBytes];
  const int lane = threadIdx.x & 63;
  const int wave = __builtin_amdgcn_readfirstlane(threadIdx.x >> 6);
  const int lr = lane & 15, lq = lane >> 4;  // MFMA lane coordinates
  uint8_t* const qstage = lds + 2 * kKTileBytes + wave * 16 * kRowBytes;  // this wave's third Q tile

  // The work: a whole item, or chunk `split` of a tail item's K tiles.
  const int bid = blockIdx.x;
  const bool tail = bid >= ap.full_items;
  const int tail_idx = tail ? (bid - ap.full_items) / ap.splits : 0;
  const int split = tail ? (bid - ap.full_items) % ap.splits : 0;
  const WorkItem w = WorkItemAt(tail ? ap.full_items + tail_idx : bid, ap.q_blocks, p.heads_q, p.batch);
  const int n_tiles = ItemKvTiles(p, w.qb, kCausal);
  const int t_begin = tail ? ChunkBegin(n_tiles, split, ap.splits) : 0;
  const int t_end = tail ? ChunkBegin(n_tiles, split + 1, ap.splits) : n_tiles;

  const int hk = w.head / p.group;
  const uint16_t* qh = static_cast<const uint16_t*>(p.q) + w.batch * p.q_batch_stride + w.head * p.q_head_stride;
  const uint16_t* kb = static_cast<const uint16_t*>(p.k) + w.batch * p.k_batch_stride + hk * p.k_head_stride;
  const uint16_t* vth = ap.vt + (static_cast<int64_t>(w.batch) * p.heads_kv + hk) * ap.vt_head_stride;

  // Rows of this wave: [row0, row0 + 48); Q tile qt holds rows row0 + 16 qt + lr
  // on this lane (the B operand of S^T: d = 16 ks + 4 lq + i).
  const int row0 = w.qb * kRows + wave * kWaveRows;
  Bf16x4 q[kRegQTiles][kKSteps];
  int last[kQTilesPerWave];  // the last key row lr of tile qt sees; -1 past seq_q
#pragma unroll
  for (int qt = 0; qt < kQTilesPerWave; ++qt) {
    const int row = row0 + qt * 16 + lr;
    last[qt] = row >= p.seq_q ? -1 : kCausal ? row + p.causal_offset : p.seq_kv - 1;
  }
#pragma unroll
  for (int qt = 0; qt < kRegQTiles; ++qt) {
    const int row = row0 + qt * 16 + lr;
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      q[qt][ks] = row < p.seq_q
                      ? *reinterpret_cast<const Bf16x4*>(qh + static_cast<int64_t>(row) * p.q_row_stride + ks * 16 +
                                                         lq * 4)
                      : Bf16x4{0, 0, 0, 0};
    }
  }
  // The third tile into the wave's LDS slice: 16 rows x 16 pieces of 16 bytes.
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int piece = lane + 64 * k, r = piece >> 4, c = piece & 15;
    const int row = row0 + 2 * 16 + r;
    U32x4 v = U32x4{0u, 0u, 0u, 0u};
    if (row < p.seq_q) v = *reinterpret_cast<const U32x4*>(qh + static_cast<int64_t>(row) * p.q_row_stride + c * 8);
    *reinterpret_cast<U32x4*>(qstage + r * kRowBytes + c * 16) = v;
  }
  // The last key any row of a Q tile, of the wave, sees (uniform): keys past
  // it are loaded for the other waves but not computed on.
  int tile_last[kQTilesPerWave];
#pragma unroll
  for (int qt = 0; qt < kQTilesPerWave; ++qt) {
    const int r0 = row0 + qt * 16;
    tile_last[qt] = r0 >= p.seq_q ? -1 : kCausal ? Min(r0 + 15, p.seq_q - 1) + p.causal_offset : p.seq_kv - 1;
  }
  int wave_last = -1;
#pragma unroll
  for (int qt = 0; qt < kQTilesPerWave; ++qt) wave_last = tile_last[qt] > wave_last ? tile_last[qt] : wave_last;

  F32x4 acc[kQTilesPerWave][kNTiles];
  float m[kQTilesPerWave], l[kQTilesPerWave];
#pragma unroll
  for (int qt = 0; qt < kQTilesPerWave; ++qt) {
    m[qt] = -INFINITY;
    l[qt] = 0.f;
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) acc[qt][n] = F32x4{0.f, 0.f, 0.f, 0.f};
  }

  const KStream kstream = MakeKStream(p, kb);
  // The head's V^T columns (kHeadDim x vt_len bf16), read through a buffer
  // resource so that every load of a tile shares one VGPR offset.
  const __amdgpu_buffer_rsrc_t vt_rsrc = __builtin_amdgcn_make_buffer_rsrc(
      const_cast<uint16_t*>(vth), 0, static_cast<int>(ap.vt_head_stride * 2), kBufferWord3);
  U32x4 next;
  if (t_begin < t_end) StoreK(lds, LoadK(kstream, t_begin * kTileTok));
  __syncthreads();  // the first K tile and every wave's Q stage
  for (int it = t_begin; it < t_end; ++it) {
    const int j0 = it * kTileTok;
    const bool more = it + 1 < t_end;
    const uint8_t* kt = lds + ((it - t_begin) & 1) * kKTileBytes;
    // 16 keys at a time: V^T of the block (B operand of P V, 16 VGPRs)
    // serves the wave's three Q tiles; S^T, the softmax step and P V go one
    // Q tile at a time. (A whole 32-key step would hold twice the V^T and
    // three S^T tiles at once: more than the 256 VGPRs two waves per SIMD
    // leave.) The first block's V^T loads go out before the next K tile's:
    // loads complete in order, so a K load issued first would hold up the
    // first P V until it lands. Both are issued by every wave and
    // unconditionally, which keeps the compiler's wait counts exact: a K
    // load past the chunk reads other rows of the head or, past seq_kv,
    // zeros (the buffer's bound), and is never stored.
    Bf16x4 vv[kNTiles];
    LoadVt(vt_rsrc, (lr * ap.vt_len + j0 + lq * 4) * 2, ap.vt_len, vv);
    __builtin_amdgcn_sched_barrier(0);  // keeps the scheduler from issuing the K load first
    next = LoadK(kstream, j0 + kTileTok);
#pragma unroll
    for (int sb = 0; sb < kSub; ++sb) {
      const int jb = j0 + sb * 16;
      if (jb > wave_last) break;
      if (sb > 0) LoadVt(vt_rsrc, (lr * ap.vt_len + jb + lq * 4) * 2, ap.vt_len, vv);
#pragma unroll
      for (int qt = 0; qt < kQTilesPerWave; ++qt) {
        if (jb > tile_last[qt]) continue;
        F32x4 s = F32x4{0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int ks = 0; ks < kKSteps; ++ks) {
          const Bf16x4 qk = qt < kRegQTiles ? q[qt < kRegQTiles ? qt : 0][ks]
                                            : *reinterpret_cast<const Bf16x4*>(qstage + lr * kRowBytes +
                                                                               (ks * 16 + lq * 4) * 2);
          const Bf16x4 ka = *reinterpret_cast<const Bf16x4*>(kt + (sb * 16 + lr) * kRowBytes + (ks * 16 + lq * 4) * 2);
          s = Mfma(ka, qk, s);
        }
        SoftmaxPv(p, s, jb, last[qt], vv, m[qt], l[qt], acc[qt]);
      }
    }
    if (more) StoreK(lds + ((it + 1 - t_begin) & 1) * kKTileBytes, next);
    __syncthreads();
  }

  // This lane holds O[row 4 lq + i of tile qt][d 16 n + lr]; a row that sees
  // no key (causal, seq_q > seq_kv) is 0, as the oracle's.
  uint16_t* oh = static_cast<uint16_t*>(ap.f.o) + w.batch * p.o_batch_stride + w.head * p.o_head_stride;
#pragma unroll
  for (int qt = 0; qt < kQTilesPerWave; ++qt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float m_r = LaneValue(m[qt], lq * 4 + i);
      const float l_r = LaneValue(l[qt], lq * 4 + i);
      const int cta_row = wave * kWaveRows + qt * 16 + lq * 4 + i;
      const int orow = w.qb * kRows + cta_row;
      if (orow >= p.seq_q) continue;
      if (!tail) {
        const float inv = l_r > 0.f ? 1.f / l_r : 0.f;
        uint16_t* o = oh + static_cast<int64_t>(orow) * p.o_row_stride + lr;
#pragma unroll
        for (int n = 0; n < kNTiles; ++n) {
          o[n * 16] = static_cast<uint16_t>(FloatToBf16Bits(acc[qt][n][i] * inv, p.rounding));
        }
      } else {
        const int64_t pi = (static_cast<int64_t>(tail_idx) * ap.splits + split) * kRows + cta_row;
        float* o = ap.part_o + pi * kHeadDim + lr;
#pragma unroll
        for (int n = 0; n < kNTiles; ++n) o[n * 16] = acc[qt][n][i];
        if (lr == 0) {
          ap.part_ml[pi * 2] = m_r;
          ap.part_ml[pi * 2 + 1] = l_r;
        }
      }
    }
  }
}

}  // namespace gfx942
}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve

// C names for hipModuleGetFunction, causal or not; two waves per SIMD (one
// eight-wave CTA per CU) is the occupancy stated above.
#define KS_ATTENTION_GFX942(NAME, CAUSAL)                                                                      \
  extern "C" __global__ void __attribute__((amdgpu_flat_work_group_size(512, 512), amdgpu_waves_per_eu(2, 2))) \
  NAME(const kernelserve::gpu::attention::gfx942::Gfx942AttnParams p) {                                        \
    kernelserve::gpu::attention::gfx942::FwdCta<CAUSAL>(p);                                                    \
  }
KS_ATTENTION_GFX942(KsAttentionFwdBf16Gfx942, false)
KS_ATTENTION_GFX942(KsAttentionFwdBf16CausalGfx942, true)
#undef KS_ATTENTION_GFX942
