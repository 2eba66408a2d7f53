// bf16 MHA forward for gfx942 (MI300X) on v_mfma_f32_16x16x16bf16_1k, as a
// template on the head dim; attention_fwd_bf16_hdim{64,128,256}.hip each
// instantiate one (causal and not) under C names. BSHD and BHSD natively
// (strides), causal with the bottom-right aligned mask, GQA, any seq_q and
// seq_kv, the output rounded once in RTNE, RTNA or RTZ (DESIGN §4).
// Compiled, never run: no AMD GPU exists on the project's machines.
//
// The seed's CTA shape: eight waves, each owning its own 16-row query tiles
// (FwdShape::q_tiles_per_wave: three at d64 and d128, two at d256) with their
// own softmax state; waves do not share query rows, so the only CTA-wide
// step is the K tile they all read. Every wave computes: the waves are
// specialized by the rows they own, not into producers and consumers (no
// wave only loads; the 512 threads share the 16-byte pieces of every K tile).
// Of a wave's Q tiles reg_q_tiles are held in registers and the rest (one at
// d64 and d128, none at d256) is staged once in the wave's slice of LDS and
// re-read per k-step: a register Q tile is head_dim / 8 VGPRs, and the
// staged one is what keeps the wave within its registers (below).
// K streams global -> LDS, 32 keys per tile, double-buffered: each thread
// issues its buffer loads of tile t + 1 before tile t's MFMAs and writes
// them to the other buffer after them, one barrier per tile. The loads go
// through a buffer resource bounded at the head's last K row, so keys past
// seq_kv read as zeros from the hardware (no padding, no bounds branch). V is
// consumed pre-transposed (the V transpose kernel writes V^T, zero past
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
// t's K tiles and leave fp32 (m, l, O) for the merge kernel.
//
// Occupancy (attention_gfx942_launch.h's FwdShape, checked on each code
// object by attention_gfx942_hdim*_hip_test), per lane, in 32-bit registers:
//   d64:  LDS 27648 (two K tiles, eight staged Q tiles), two CTAs per CU,
//         four waves per SIMD, <= 128 VGPR + AGPR: O 3 x 4 x 4 = 48, Q 2 x 8,
//         V^T 8, S^T 4.
//   d128: LDS 52224, one CTA per CU, two waves per SIMD, <= 256: O 3 x 8 x 4
//         = 96, Q 2 x 16, V^T 16, S^T 4.
//   d256: LDS 33792 (two K tiles; no Q stage), one CTA per CU, <= 256: O 2 x
//         16 x 4 = 128, Q 2 x 32, V^T in groups of kVtGroup column tiles (8),
//         S^T 4, the K prefetch 8.
// No scratch.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_GFX942_ATTENTION_ATTENTION_FWD_BF16_KERNEL_H_
#define KERNELSERVE_KERNELS_GPU_ARCH_GFX942_ATTENTION_ATTENTION_FWD_BF16_KERNEL_H_

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

typedef unsigned U32x4 __attribute__((ext_vector_type(4)));

// Buffer resource word 3 on gfx9: 32-bit data format, raw (unswizzled) access.
constexpr int kBufferWord3 = 0x00020000;
constexpr int kSub = kTileTok / 16;  // 16-key softmax steps per K tile: 2

// The compile-time tiling of head dim kD.
template <int kD>
struct Tiling {
  static constexpr FwdShape kS = ShapeOf(kD);
  static_assert(kS.head_dim == kD, "a served head dim");
  static constexpr int kKSteps = kD / 16;  // MFMA k-steps of S^T = K Q^T
  static constexpr int kNTiles = kD / 16;  // 16-column tiles of O
  static constexpr int kQTiles = kS.q_tiles_per_wave;
  static constexpr int kRegQTiles = kS.reg_q_tiles;
  static constexpr int kStagedQTiles = kQTiles - kRegQTiles;
  static constexpr int kRowBytes = kS.row_bytes();
  static constexpr int kKTileBytes = kS.k_tile_bytes();
  static constexpr int kWaveStageBytes = kStagedQTiles * 16 * kRowBytes;
  static constexpr int kPiecesPerRow = kD / 8;  // 16-byte pieces of a bf16 row
  // A K tile's pieces: 256 at d64 (waves 0-3 store them; waves 4-7 load the
  // same pieces, so every wave issues the same loads), 512 at d128, 1024 at
  // d256 (two per thread).
  static constexpr int kKPieces = kTileTok * kPiecesPerRow;
  static constexpr int kKLoads = kKPieces > kThreads ? kKPieces / kThreads : 1;
  // P V's B operands loaded at once: all of a 16-key block's column tiles
  // but at d256, where 16 VGPRs of V^T next to 128 of O and 64 of Q would
  // leave too little of the 256.
  static constexpr int kVtGroup = kD <= 128 ? kNTiles : 4;
  static_assert(kKPieces % kThreads == 0 || kThreads % kKPieces == 0, "whole pieces per thread");
  static_assert(kNTiles % kVtGroup == 0, "whole V^T groups");
  static_assert(kS.lds_bytes() == 2 * kKTileBytes + kWaves * kWaveStageBytes, "the LDS map below");
  static_assert(kS.lds_bytes() * kS.ctas_per_cu <= kCuLdsBytes, "the stated CTAs per CU fit the CU's LDS");
};

struct KStream {
  __amdgpu_buffer_rsrc_t rsrc;
  int row_bytes;  // k_row_stride in bytes
};

template <int kD>
__device__ __forceinline__ KStream MakeKStream(const FlashFwdParams& p, const uint16_t* kb) {
  // Bytes up to the end of the head's last K row (Unsupported keeps it 31-bit).
  const int bytes = static_cast<int>(((p.seq_kv - 1) * p.k_row_stride + kD) * 2);
  return KStream{__builtin_amdgcn_make_buffer_rsrc(const_cast<uint16_t*>(kb), 0, bytes, kBufferWord3),
                 static_cast<int>(p.k_row_stride * 2)};
}

// Piece i of thread t's share of a K tile: t + kThreads i, modulo the tile's
// pieces (d64: waves 4-7 repeat waves 0-3's).
template <int kD>
__device__ __forceinline__ int KPiece(int i) {
  using T = Tiling<kD>;
  return (static_cast<int>(threadIdx.x) + kThreads * i) % T::kKPieces;
}

// Thread t's pieces of the K tile of keys [j0, j0 + kTileTok): piece pc is
// key pc / kPiecesPerRow, bytes 16 (pc % kPiecesPerRow) of its row; zeros
// past seq_kv (out of the resource).
template <int kD>
__device__ __forceinline__ void LoadK(const KStream& ks, int j0, U32x4 (&v)[Tiling<kD>::kKLoads]) {
  using T = Tiling<kD>;
#pragma unroll
  for (int i = 0; i < T::kKLoads; ++i) {
    const int pc = KPiece<kD>(i), tok = pc / T::kPiecesPerRow, c = pc % T::kPiecesPerRow;
    v[i] = __builtin_amdgcn_raw_buffer_load_b128(ks.rsrc, (j0 + tok) * ks.row_bytes + c * 16, 0, 0);
  }
}

template <int kD>
__device__ __forceinline__ void StoreK(uint8_t* tile, const U32x4 (&v)[Tiling<kD>::kKLoads]) {
  using T = Tiling<kD>;
  // d64: the second half of the CTA (whole waves) holds copies; one store.
  if (T::kKPieces < kThreads && static_cast<int>(threadIdx.x) >= T::kKPieces) return;
#pragma unroll
  for (int i = 0; i < T::kKLoads; ++i) {
    const int pc = KPiece<kD>(i), tok = pc / T::kPiecesPerRow, c = pc % T::kPiecesPerRow;
    *reinterpret_cast<U32x4*>(tile + tok * T::kRowBytes + c * 16) = v[i];
  }
}

// V^T[d 16 (g + n) + lr][key j + 4 lq + i] for the column tiles g .. g +
// kVtGroup, at byte offset voff of key j: one VGPR offset for the group (the
// column tile's offset is uniform, an SGPR).
template <int kD>
__device__ __forceinline__ void LoadVt(__amdgpu_buffer_rsrc_t rsrc, int voff, int vt_len, int g,
                                       Bf16x4 (&vv)[Tiling<kD>::kVtGroup]) {
#pragma unroll
  for (int n = 0; n < Tiling<kD>::kVtGroup; ++n) {
    vv[n] = __builtin_bit_cast(Bf16x4,
                               __builtin_amdgcn_raw_buffer_load_b64(rsrc, voff, (g + n) * 16 * vt_len * 2, 0));
  }
}

// One Q tile's online-softmax step over the 16 keys at j0: s holds S^T[key
// j0 + 4 lq + i][row lr]; `last` is the last key row lr sees. Rescales the
// tile's O by the step's alpha and returns P[row lr][key 4 lq + i], the A
// operand of O += P V.
template <int kD>
__device__ __forceinline__ Bf16x4 SoftmaxStep(const FlashFwdParams& p, F32x4 s, int j0, int last, float& m, float& l,
                                              F32x4 (&acc)[Tiling<kD>::kNTiles]) {
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
  Bf16x4 pa;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t bits = FloatToBf16Bits(Exp2Approx(t[i] - m_use), kRoundRtne);
    psum += __uint_as_float(bits << 16);  // the sum of the probabilities the MFMA sees
    pa[i] = static_cast<short>(bits);
  }
  l = l * alpha + RowSum(psum);
  // O rows 4 lq + i take their row's alpha from a lane of that row.
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float a = LaneValue(alpha, lq * 4 + i);
#pragma unroll
    for (int n = 0; n < Tiling<kD>::kNTiles; ++n) acc[n][i] *= a;
  }
  return pa;
}

template <int kD, bool kCausal>
__device__ __forceinline__ void FwdCta(const Gfx942AttnParams& ap) {
  using T = Tiling<kD>;
  constexpr int kRows = T::kS.rows(), kWaveRows = T::kS.wave_rows(), kRowBytes = T::kRowBytes;
  const FlashFwdParams& p = ap.f;
  __shared__ __attribute__((aligned(16))) uint8_t lds[T::kS.lds_bytes()];
  const int lane = threadIdx.x & 63;
  const int wave = __builtin_amdgcn_readfirstlane(threadIdx.x >> 6);
  const int lr = lane & 15, lq = lane >> 4;  // MFMA lane coordinates
  uint8_t* const qstage = lds + 2 * T::kKTileBytes + wave * T::kWaveStageBytes;  // this wave's staged Q tiles

  // The work: a whole item, or chunk `split` of a tail item's K tiles.
  const int bid = blockIdx.x;
  const bool tail = bid >= ap.full_items;
  const int tail_idx = tail ? (bid - ap.full_items) / ap.splits : 0;
  const int split = tail ? (bid - ap.full_items) % ap.splits : 0;
  const WorkItem w = WorkItemAt(tail ? ap.full_items + tail_idx : bid, ap.q_blocks, p.heads_q, p.batch);
  const int n_tiles = ItemKvTiles(p, kRows, w.qb, kCausal);
  const int t_begin = tail ? ChunkBegin(n_tiles, split, ap.splits) : 0;
  const int t_end = tail ? ChunkBegin(n_tiles, split + 1, ap.splits) : n_tiles;

  const int hk = w.head / p.group;
  const uint16_t* qh = static_cast<const uint16_t*>(p.q) + w.batch * p.q_batch_stride + w.head * p.q_head_stride;
  const uint16_t* kb = static_cast<const uint16_t*>(p.k) + w.batch * p.k_batch_stride + hk * p.k_head_stride;
  const uint16_t* vth = ap.vt + (static_cast<int64_t>(w.batch) * p.heads_kv + hk) * ap.vt_head_stride;

  // Rows of this wave: [row0, row0 + kWaveRows); Q tile qt holds rows row0 +
  // 16 qt + lr on this lane (the B operand of S^T: d = 16 ks + 4 lq + i).
  const int row0 = w.qb * kRows + wave * kWaveRows;
  Bf16x4 q[T::kRegQTiles][T::kKSteps];
  int last[T::kQTiles];  // the last key row lr of tile qt sees; -1 past seq_q
#pragma unroll
  for (int qt = 0; qt < T::kQTiles; ++qt) {
    const int row = row0 + qt * 16 + lr;
    last[qt] = row >= p.seq_q ? -1 : kCausal ? row + p.causal_offset : p.seq_kv - 1;
  }
#pragma unroll
  for (int qt = 0; qt < T::kRegQTiles; ++qt) {
    const int row = row0 + qt * 16 + lr;
#pragma unroll
    for (int ks = 0; ks < T::kKSteps; ++ks) {
      q[qt][ks] = row < p.seq_q
                      ? *reinterpret_cast<const Bf16x4*>(qh + static_cast<int64_t>(row) * p.q_row_stride + ks * 16 +
                                                         lq * 4)
                      : Bf16x4{0, 0, 0, 0};
    }
  }
  // The staged tiles into the wave's LDS slice: 16 rows x kPiecesPerRow
  // pieces of 16 bytes each.
#pragma unroll
  for (int st = 0; st < T::kStagedQTiles; ++st) {
#pragma unroll
    for (int k = 0; k < 16 * T::kPiecesPerRow / 64; ++k) {
      const int piece = lane + 64 * k, r = piece / T::kPiecesPerRow, c = piece % T::kPiecesPerRow;
      const int row = row0 + (T::kRegQTiles + st) * 16 + r;
      U32x4 v = U32x4{0u, 0u, 0u, 0u};
      if (row < p.seq_q) v = *reinterpret_cast<const U32x4*>(qh + static_cast<int64_t>(row) * p.q_row_stride + c * 8);
      *reinterpret_cast<U32x4*>(qstage + (st * 16 + r) * kRowBytes + c * 16) = v;
    }
  }
  // The last key any row of a Q tile, of the wave, sees (uniform): keys past
  // it are loaded for the other waves but not computed on.
  int tile_last[T::kQTiles];
#pragma unroll
  for (int qt = 0; qt < T::kQTiles; ++qt) {
    const int r0 = row0 + qt * 16;
    tile_last[qt] = r0 >= p.seq_q ? -1 : kCausal ? Min(r0 + 15, p.seq_q - 1) + p.causal_offset : p.seq_kv - 1;
  }
  int wave_last = -1;
#pragma unroll
  for (int qt = 0; qt < T::kQTiles; ++qt) wave_last = tile_last[qt] > wave_last ? tile_last[qt] : wave_last;

  F32x4 acc[T::kQTiles][T::kNTiles];
  float m[T::kQTiles], l[T::kQTiles];
#pragma unroll
  for (int qt = 0; qt < T::kQTiles; ++qt) {
    m[qt] = -INFINITY;
    l[qt] = 0.f;
#pragma unroll
    for (int n = 0; n < T::kNTiles; ++n) acc[qt][n] = F32x4{0.f, 0.f, 0.f, 0.f};
  }

  const KStream kstream = MakeKStream<kD>(p, kb);
  // The head's V^T columns (kD x vt_len bf16), read through a buffer
  // resource so that every load of a group shares one VGPR offset.
  const __amdgpu_buffer_rsrc_t vt_rsrc = __builtin_amdgcn_make_buffer_rsrc(
      const_cast<uint16_t*>(vth), 0, static_cast<int>(ap.vt_head_stride * 2), kBufferWord3);
  U32x4 next[T::kKLoads];
  if (t_begin < t_end) {
    LoadK<kD>(kstream, t_begin * kTileTok, next);
    StoreK<kD>(lds, next);
  }
  __syncthreads();  // the first K tile and every wave's Q stage
  for (int it = t_begin; it < t_end; ++it) {
    const int j0 = it * kTileTok;
    const bool more = it + 1 < t_end;
    const uint8_t* kt = lds + ((it - t_begin) & 1) * T::kKTileBytes;
    // 16 keys at a time: the wave's Q tiles each take S^T and a softmax
    // step, then P V, each V^T group (B operands) serving every Q tile. (A
    // whole 32-key step would hold twice the V^T and every S^T at once: more
    // than the registers the occupancy leaves.) The first group's V^T loads
    // go out before the next K tile's: loads complete in order, so a K load
    // issued first would hold up the first P V until it lands. Both are
    // issued by every wave and unconditionally, which keeps the compiler's
    // wait counts exact: a K load past the chunk reads other rows of the
    // head or, past seq_kv, zeros (the buffer's bound), and is never stored.
    Bf16x4 vv[T::kVtGroup];
    LoadVt<kD>(vt_rsrc, (lr * ap.vt_len + j0 + lq * 4) * 2, ap.vt_len, 0, vv);
    __builtin_amdgcn_sched_barrier(0);  // keeps the scheduler from issuing the K load first
    LoadK<kD>(kstream, j0 + kTileTok, next);
#pragma unroll
    for (int sb = 0; sb < kSub; ++sb) {
      const int jb = j0 + sb * 16;
      if (jb > wave_last) break;
      Bf16x4 pa[T::kQTiles];
#pragma unroll
      for (int qt = 0; qt < T::kQTiles; ++qt) {
        if (jb > tile_last[qt]) continue;
        F32x4 s = F32x4{0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int ks = 0; ks < T::kKSteps; ++ks) {
          const Bf16x4 qk =
              qt < T::kRegQTiles
                  ? q[qt < T::kRegQTiles ? qt : 0][ks]
                  : *reinterpret_cast<const Bf16x4*>(qstage + ((qt - T::kRegQTiles) * 16 + lr) * kRowBytes +
                                                     (ks * 16 + lq * 4) * 2);
          const Bf16x4 ka = *reinterpret_cast<const Bf16x4*>(kt + (sb * 16 + lr) * kRowBytes + (ks * 16 + lq * 4) * 2);
          s = Mfma(ka, qk, s);
        }
        pa[qt] = SoftmaxStep<kD>(p, s, jb, last[qt], m[qt], l[qt], acc[qt]);
      }
#pragma unroll
      for (int g = 0; g < T::kNTiles; g += T::kVtGroup) {
        if (sb > 0 || g > 0) LoadVt<kD>(vt_rsrc, (lr * ap.vt_len + jb + lq * 4) * 2, ap.vt_len, g, vv);
#pragma unroll
        for (int qt = 0; qt < T::kQTiles; ++qt) {
          if (jb > tile_last[qt]) continue;
#pragma unroll
          for (int n = 0; n < T::kVtGroup; ++n) acc[qt][g + n] = Mfma(pa[qt], vv[n], acc[qt][g + n]);
        }
      }
    }
    if (more) StoreK<kD>(lds + ((it + 1 - t_begin) & 1) * T::kKTileBytes, next);
    __syncthreads();
  }

  // This lane holds O[row 4 lq + i of tile qt][d 16 n + lr]; a row that sees
  // no key (causal, seq_q > seq_kv) is 0, as the oracle's.
  uint16_t* oh = static_cast<uint16_t*>(ap.f.o) + w.batch * p.o_batch_stride + w.head * p.o_head_stride;
#pragma unroll
  for (int qt = 0; qt < T::kQTiles; ++qt) {
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
        for (int n = 0; n < T::kNTiles; ++n) {
          o[n * 16] = static_cast<uint16_t>(FloatToBf16Bits(acc[qt][n][i] * inv, p.rounding));
        }
      } else {
        const int64_t pi = (static_cast<int64_t>(tail_idx) * ap.splits + split) * kRows + cta_row;
        float* o = ap.part_o + pi * kD + lr;
#pragma unroll
        for (int n = 0; n < T::kNTiles; ++n) o[n * 16] = acc[qt][n][i];
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

// The C names of head dim D's forward, causal or not, for
// hipModuleGetFunction (attention_gfx942_launch.h's kKernels), at the
// occupancy its FwdShape states: 512 threads, kWaves / 4 x ctas_per_cu waves
// per SIMD.
#define KS_ATTENTION_FWD_GFX942(NAME, D, CAUSAL, WAVES_PER_EU)                                       \
  extern "C" __global__ void                                                                         \
      __attribute__((amdgpu_flat_work_group_size(512, 512), amdgpu_waves_per_eu(WAVES_PER_EU, WAVES_PER_EU))) \
      NAME(const kernelserve::gpu::attention::gfx942::Gfx942AttnParams p) {                          \
    static_assert(kernelserve::gpu::attention::gfx942::ShapeOf(D).waves_per_simd() == WAVES_PER_EU,  \
                  "the occupancy FwdShape states");                                                  \
    kernelserve::gpu::attention::gfx942::FwdCta<D, CAUSAL>(p);                                       \
  }

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_GFX942_ATTENTION_ATTENTION_FWD_BF16_KERNEL_H_
