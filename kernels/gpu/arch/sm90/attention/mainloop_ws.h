// Mainloop of the warp-specialized sm_90a attention kernel: the producer's
// TMA loads into a ring of K/V stages and the consumers' wgmma / softmax
// loop. Masking and softmax (softmax.h) and the epilogue (epilogue.h) work
// on the mma.sync m16n8 accumulator layout, which a wgmma accumulator holds
// per warp.
//
// Shared memory (all tiles [kD / 64 column blocks][rows][64], 128-byte
// swizzled, as TMA's SWIZZLE_128B writes them): Q (kBlockM rows), kStages K tiles,
// kStages V tiles, then the mbarriers and 8 bytes of scratch per consumer warp:
//   q_full                 1 arrival + Q's bytes, waited once
//   k_full[s], v_full[s]   1 arrival (the producer's expect_tx) + the tile's bytes
//   k_empty[s], v_empty[s] one arrival per consumer warp once its wgmma read the tile
// Tile n uses stage n % kStages in phase (n / kStages) & 1.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM90_ATTENTION_MAINLOOP_WS_H_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM90_ATTENTION_MAINLOOP_WS_H_

#include <math.h>

#include <cstdint>

#include "kernels/gpu/arch/sm80/mma.cuh"
#include "kernels/gpu/arch/sm90/attention/softmax.h"
#include "kernels/gpu/arch/sm90/pipeline.cuh"
#include "kernels/gpu/arch/sm90/wgmma.cuh"
#include "kernels/gpu/attention/flash_params.h"

namespace kernelserve {
namespace gpu {
namespace attention {

// Shared-memory addresses of one CTA's tiles and barriers.
template <typename Traits>
struct WsSmem {
  static constexpr int kStages = Traits::kStages;
  uint32_t q, k, v, bars;

  __device__ static WsSmem At(uint32_t base) {  // base: 1024-byte aligned
    WsSmem s;
    s.q = base;
    s.k = s.q + Traits::kTileQBytes;
    s.v = s.k + kStages * Traits::kTileKVBytes;
    s.bars = s.v + kStages * Traits::kTileKVBytes;
    return s;
  }
  __device__ uint32_t KTile(int stage) const { return k + stage * Traits::kTileKVBytes; }
  __device__ uint32_t VTile(int stage) const { return v + stage * Traits::kTileKVBytes; }
  __device__ uint32_t QFull() const { return bars; }
  __device__ uint32_t KFull(int stage) const { return bars + 8u * (1 + stage); }
  __device__ uint32_t KEmpty(int stage) const { return bars + 8u * (1 + kStages + stage); }
  __device__ uint32_t VFull(int stage) const { return bars + 8u * (1 + 2 * kStages + stage); }
  __device__ uint32_t VEmpty(int stage) const { return bars + 8u * (1 + 3 * kStages + stage); }
  // 8 bytes per consumer warp after the barriers (WsMainloop::PinBeforeWait).
  __device__ uint32_t Scratch(int consumer_warp) const {
    return bars + 8u * (1 + 4 * kStages) + 8u * consumer_warp;
  }

  // One thread, before the CTA barrier that precedes the role split.
  __device__ void InitBarriers() const {
    sm90::MbarInit(QFull(), 1);
    for (int s = 0; s < kStages; ++s) {
      sm90::MbarInit(KFull(s), 1);
      sm90::MbarInit(VFull(s), 1);
      sm90::MbarInit(KEmpty(s), Traits::kConsumerWarps);
      sm90::MbarInit(VEmpty(s), Traits::kConsumerWarps);
    }
    sm90::FenceMbarInit();
  }
};

template <typename Traits>
struct WsMainloop {
  static constexpr int kBlockM = Traits::kBlockM;
  static constexpr int kBlockN = Traits::kBlockN;
  static constexpr int kD = Traits::kHeadDim;
  static constexpr int kStages = Traits::kStages;
  static constexpr int kNTiles = kBlockN / 8;
  static constexpr int kColBlocks = Traits::kColBlocks;
  // S: m64n{kBlockN}k16; O += P V: m64n{kD}k16.
  static_assert(kBlockN == 64 || kBlockN == 128 || kBlockN == 176, "the score wgmma is m64n{64,128,176}k16");

  // ---- Producer: one thread. ----

  // A kRows x kD tile = kD / 64 boxes of 64 columns (the 128-byte swizzle
  // spans at most 128 bytes of a row), kRows * 128 bytes apart. Coordinates are
  // (column, row, head, batch) or, for maps over (d, head, seq, batch),
  // (column, head, row, batch).
  template <int kRows>
  __device__ static void LoadTile(const void* map, uint32_t dst, uint32_t bar, int row, int head,
                                  int batch, bool heads_inner) {
    const int c1 = heads_inner ? head : row;
    const int c2 = heads_inner ? row : head;
#pragma unroll
    for (int cb = 0; cb < kColBlocks; ++cb) {
      sm90::TmaLoad4d(dst + cb * kRows * 128, map, bar, 64 * cb, c1, c2, batch);
    }
  }

  // Q once, then K and V of key tiles [kv0, kv0 + n_blocks * kBlockN)
  // through the ring (kv0 > 0: a chunk of the dense-tail split). Each stage is
  // refilled only after all consumer warps released it (empty barrier); the
  // producer's waits suspend its warp (MbarWaitSleep) instead of spinning in
  // the issue slots of the consumer warps beside it.
  __device__ static void Produce(const void* map_q, const void* map_k, const void* map_v,
                                 bool heads_inner, const WsSmem<Traits>& sm, int m0, int head,
                                 int kv_head, int batch, int kv0, int n_blocks) {
    sm90::PrefetchTensorMap(map_q);
    sm90::PrefetchTensorMap(map_k);
    sm90::PrefetchTensorMap(map_v);
    sm90::MbarArriveExpectTx(sm.QFull(), Traits::kTileQBytes);
    LoadTile<kBlockM>(map_q, sm.q, sm.QFull(), m0, head, batch, heads_inner);
    for (int nb = 0; nb < n_blocks; ++nb) {
      const int stage = nb % kStages;
      const uint32_t phase = (nb / kStages) & 1;
      sm90::MbarWaitSleep(sm.KEmpty(stage), phase ^ 1);
      sm90::MbarArriveExpectTx(sm.KFull(stage), Traits::kTileKVBytes);
      LoadTile<kBlockN>(map_k, sm.KTile(stage), sm.KFull(stage), kv0 + nb * kBlockN, kv_head, batch,
                        heads_inner);
      sm90::MbarWaitSleep(sm.VEmpty(stage), phase ^ 1);
      sm90::MbarArriveExpectTx(sm.VFull(stage), Traits::kTileKVBytes);
      LoadTile<kBlockN>(map_v, sm.VTile(stage), sm.VFull(stage), kv0 + nb * kBlockN, kv_head, batch,
                        heads_inner);
    }
  }

  // ---- Consumers: one warpgroup of 64 query rows each. ----

  // S = Q K^T over d (kD / 16 k-steps): k-step kk in column block kk / 4 at
  // byte offset 32 * (kk % 4) within the 128-byte rows.
  // q_desc, k_desc: descriptors of this warpgroup's Q rows and of the K
  // tile's first byte (sm90::DescPlus moves them).
  __device__ static void IssueScores(float (&s)[kNTiles][4], uint64_t q_desc, uint64_t k_desc) {
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      const uint32_t k_off = 32u * (kk & 3);
      const uint32_t q_blk = (kk >> 2) * 2u * (kBlockM * 64);
      const uint32_t k_blk = (kk >> 2) * 2u * (kBlockN * 64);
      sm90::WgmmaSS<kBlockN, sm90::Bf16>(s, sm90::DescPlus(q_desc, q_blk + k_off), sm90::DescPlus(k_desc, k_blk + k_off),
                                         kk > 0 ? 1 : 0);
    }
  }

  // O += P V: V the MN-major operand (d blocks kBlockN * 128 bytes apart,
  // 8-key groups 1024 bytes apart; kD / 64 d blocks), P from registers.
  // v_desc: the V tile's first byte (lbo kBlockN * 128, sbo 1024).
  __device__ static void IssuePv(float (&acc)[kD / 8][4], const uint32_t (&pa)[kBlockN / 16][4],
                                 uint64_t v_desc) {
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      sm90::WgmmaRS<kD, sm90::Bf16, true>(acc, pa[kk], sm90::DescPlus(v_desc, kk * 16u * 128u), 1);
    }
  }

  // Masks (softmax.h's MaskScores) only the tiles that reach seq_kv or the
  // causal diagonal; the condition is CTA-uniform.
  __device__ static void MaskTile(float (&s)[kNTiles][4], const FlashFwdParams& p, int n0,
                                  int first_masked_key, int row_base, int lane) {
    if (n0 + kBlockN > p.seq_kv || n0 + kBlockN > first_masked_key) {
      MaskScores<Traits::kCausal>(s, n0, row_base, p.seq_kv, p.causal_offset, lane);
    }
  }

  // ptxas schedules a wgmma wait as early as the wait's own dependencies
  // allow: it hoisted wait_group 0 above the softmax, all 64 exponentials
  // after it (seen in the SASS). It does not move the wait above a shared
  // store, and a store of the row sums depends on every probability, so this
  // store (never read) keeps the softmax under PV(nb-1).
  __device__ static void PinBeforeWait(uint32_t scratch, const OnlineSoftmax<kNTiles>& softmax) {
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(scratch), "f"(softmax.row_sum[0]),
                 "f"(softmax.row_sum[1])
                 : "memory");
  }

  __device__ static void Rescale(float (&acc)[kD / 8][4], const float (&alpha)[2]) {
#pragma unroll
    for (int j = 0; j < kD / 8; ++j) {
      acc[j][0] *= alpha[0];
      acc[j][1] *= alpha[0];
      acc[j][2] *= alpha[1];
      acc[j][3] *= alpha[1];
    }
  }

  // P rounded to bf16 (RTNE) in the A-fragment layout.
  __device__ static void PackP(const float (&s)[kNTiles][4], uint32_t (&pa)[kBlockN / 16][4]) {
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      pa[kk][0] = sm80::PackBf16x2Rn(s[2 * kk][0], s[2 * kk][1]);
      pa[kk][1] = sm80::PackBf16x2Rn(s[2 * kk][2], s[2 * kk][3]);
      pa[kk][2] = sm80::PackBf16x2Rn(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      pa[kk][3] = sm80::PackBf16x2Rn(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }
  }

  // Consumer `wg` (0 or 1) walks n_blocks > 0 key tiles from key kv0 for its
  // 64 rows.
  //
  // Intra-warpgroup overlap: iteration nb issues S(nb) = Q K(nb)^T and then
  // O += P(nb-1) V(nb-1) as two commit groups; wait_group 1 retires S(nb), so
  // the softmax of tile nb runs while PV(nb-1) is still on the tensor cores.
  // The rescale by alpha(nb) and the conversion of P(nb) follow wait_group 0,
  // so O(nb) = O(nb-1) * alpha(nb) + P(nb) V(nb). No wgmma group is in flight across the loop's back edge
  // (ptxas would serialize every wgmma otherwise).
  //
  // Ping-pong between the two consumers: each issues its products only in
  // its turn (named barrier kTurnBarrier + wg, 256 threads: this
  // warpgroup's sync plus the other's arrive) and passes the turn as soon as
  // they are issued, so one warpgroup's softmax runs under the other's
  // matrix products. Consumer 1 hands consumer 0 the first turn; each takes
  // n_blocks + 1 turns and consumer 1's last one passes nothing, so every
  // arrive meets a sync.
  __device__ static void Consume(const FlashFwdParams& p, const WsSmem<Traits>& sm, int wg, int m0,
                                 int kv0, int n_blocks, float (&acc)[kD / 8][4],
                                 OnlineSoftmax<kNTiles>& softmax) {
    constexpr uint32_t kTurnThreads = 2 * 128;
    const int lane = threadIdx.x & 31;
    const int warp_in_wg = (threadIdx.x >> 5) & 3;
    const int row_base = m0 + 64 * wg + 16 * warp_in_wg;  // this warp's first query row
    const int first_masked_key = Traits::kCausal ? m0 + p.causal_offset + 1 : p.seq_kv;
    const uint32_t sq_wg = sm.q + 2u * (64 * wg) * 64;  // this warpgroup's 64 rows of Q
    const uint32_t my_turn = Traits::kTurnBarrier + wg;
    const uint32_t other_turn = Traits::kTurnBarrier + (wg ^ 1);
    const bool release = lane == 0;  // one arrival per warp on the empty barriers
    const uint32_t scratch = sm.Scratch(4 * wg + warp_in_wg);
    // Descriptors made once; per tile they move by the stage's offset.
    const uint64_t q_desc = sm90::MakeSmemDesc(sq_wg, 16, 1024);
    const uint64_t k_desc = sm90::MakeSmemDesc(sm.KTile(0), 16, 1024);
    const uint64_t v_desc = sm90::MakeSmemDesc(sm.VTile(0), kBlockN * 128, 1024);
    auto k_at = [&](int stage) { return sm90::DescPlus(k_desc, sm.KTile(stage) - sm.KTile(0)); };
    auto v_at = [&](int stage) { return sm90::DescPlus(v_desc, sm.VTile(stage) - sm.VTile(0)); };

    float s[kNTiles][4];
    uint32_t pa[kBlockN / 16][4];
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
    float alpha[2];

    sm90::NamedBarrierArriveIf(Traits::kTurnBarrier, kTurnThreads, wg == 1);
    sm90::MbarWait(sm.QFull(), 0);

    // Tile 0: S(0) alone.
    sm90::MbarWait(sm.KFull(0), 0);
    sm90::NamedBarrierSync(my_turn, kTurnThreads);
    sm90::FenceOperand(s);
    sm90::WgmmaFence();
    IssueScores(s, q_desc, k_desc);
    sm90::WgmmaCommit();
    sm90::NamedBarrierArrive(other_turn, kTurnThreads);
    sm90::WgmmaWait<0>();
    sm90::FenceOperand(s);
    sm90::MbarArriveIf(sm.KEmpty(0), release);
    MaskTile(s, p, kv0, first_masked_key, row_base, lane);
    softmax.Update(s, p.scale_log2, alpha);
    Rescale(acc, alpha);
    PackP(s, pa);

    for (int nb = 1; nb < n_blocks; ++nb) {
      const int stage = nb % kStages;
      const uint32_t phase = (nb / kStages) & 1;
      const int prev = (nb - 1) % kStages;
      const uint32_t prev_phase = ((nb - 1) / kStages) & 1;
      sm90::MbarWait(sm.KFull(stage), phase);
      sm90::MbarWait(sm.VFull(prev), prev_phase);
      sm90::NamedBarrierSync(my_turn, kTurnThreads);
      // Registers feeding or receiving a wgmma are pinned before the fence.
      sm90::FenceOperand(s);
      sm90::FenceOperand(pa);
      sm90::FenceOperand(acc);
      sm90::WgmmaFence();
      IssueScores(s, q_desc, k_at(stage));
      sm90::WgmmaCommit();
      IssuePv(acc, pa, v_at(prev));
      sm90::WgmmaCommit();
      sm90::NamedBarrierArrive(other_turn, kTurnThreads);
      sm90::WgmmaWait<1>();  // S(nb) done; PV(nb-1) may still run
      sm90::FenceOperand(s);
      sm90::MbarArriveIf(sm.KEmpty(stage), release);
      MaskTile(s, p, kv0 + nb * kBlockN, first_masked_key, row_base, lane);
      softmax.Update(s, p.scale_log2, alpha);
      PinBeforeWait(scratch, softmax);
      sm90::WgmmaWait<0>();
      sm90::FenceOperand(pa);  // PV(nb-1) read pa until here
      sm90::FenceOperand(acc);
      sm90::FenceOperand(s);
      sm90::MbarArriveIf(sm.VEmpty(prev), release);
      Rescale(acc, alpha);
      PackP(s, pa);
    }

    // The last tile's PV.
    const int last = (n_blocks - 1) % kStages;
    sm90::MbarWait(sm.VFull(last), ((n_blocks - 1) / kStages) & 1);
    sm90::NamedBarrierSync(my_turn, kTurnThreads);
    sm90::FenceOperand(pa);
    sm90::FenceOperand(acc);
    sm90::WgmmaFence();
    IssuePv(acc, pa, v_at(last));
    sm90::WgmmaCommit();
    sm90::NamedBarrierArriveIf(other_turn, kTurnThreads, wg == 0);
    sm90::WgmmaWait<0>();
    sm90::FenceOperand(acc);
  }
};

}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM90_ATTENTION_MAINLOOP_WS_H_
