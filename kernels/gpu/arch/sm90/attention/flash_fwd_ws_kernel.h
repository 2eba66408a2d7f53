// Hopper (sm_90a) bf16 MHA forward, head dims 64, 128 and 256,
// warp-specialized in FlashAttention-3's structure.
//
// Three warpgroups per CTA of kBlockM = 128 query rows:
//   warpgroup 0, the producer: setmaxnreg down to 24 registers; one thread
//     loads Q once and K/V tiles of kBlockN keys (128; 64 at d256) through
//     TMA into a kStages ring of shared-memory stages with full/empty
//     mbarriers (a tile is kD / 64 column blocks of 64: one at d64, two at
//     d128, four at d256);
//   warpgroups 1 and 2, the consumers: setmaxnreg up to 240; 64 query rows
//     each, wgmma for S = Q K^T and O += P V, the online softmax between,
//     the shared epilogue at the end.
// No CTA-wide barrier after the role split: consumers wait on the full
// barriers, release stages on the empty ones and alternate their wgmma issue
// on two named barriers (mainloop_ws.h).
//
// The grid is one dimension (ws_plan.h): CTA c < full_items runs work item c
// of the tile order (tile_scheduler.h) whole; the CTAs after them, when the
// dense-tail split is on, run chunk (c - full_items) % splits of item
// full_items + (c - full_items) / splits, a contiguous range of its key
// tiles, and write fp32 partials that FlashFwdWsMergeKernel (launched next
// on the stream) merges in chunk order. With the split off every CTA runs
// one item whole, and the output is the same bits whatever the order.
//
// The TMA maps (flash_fwd_ws_launch.h) are passed as __grid_constant__
// kernel parameters. Out-of-bounds rows are zero-filled by TMA.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM90_ATTENTION_FLASH_FWD_WS_KERNEL_H_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM90_ATTENTION_FLASH_FWD_WS_KERNEL_H_

#include <cuda.h>

#include <cstdint>

#include "kernels/gpu/arch/sm80/mma.cuh"
#include "kernels/gpu/arch/sm90/attention/epilogue.h"
#include "kernels/gpu/arch/sm90/attention/mainloop_ws.h"
#include "kernels/gpu/arch/sm90/attention/softmax.h"
#include "kernels/gpu/arch/sm90/attention/ws_plan.h"
#include "kernels/gpu/arch/sm90/pipeline.cuh"
#include "kernels/gpu/attention/dense_tail.h"
#include "kernels/gpu/attention/flash_params.h"
#include "kernels/gpu/attention/round_bf16.cuh"
#include "kernels/gpu/attention/tile_scheduler.h"

namespace kernelserve {
namespace gpu {
namespace attention {

template <int kHeadDim_, bool kCausal_, int kStages_>
struct WsTraits {
  static constexpr bool kCausal = kCausal_;
  static constexpr int kHeadDim = kHeadDim_;
  static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256,
                "the tiles are one, two or four 64-column blocks");
  static constexpr int kColBlocks = kHeadDim / 64;
  static constexpr int kConsumers = 2;  // warpgroups of 64 query rows
  static constexpr int kConsumerWarps = 4 * kConsumers;
  static constexpr int kThreads = 128 * (kConsumers + 1);
  static constexpr int kBlockM = 64 * kConsumers;
  // ws_plan.h's choice. d256 takes 64 keys a tile: a consumer then holds O
  // (128 fp32 registers), S (32) and P (16) within setmaxnreg's 240, and Q
  // (64 KB) with two stages of K and V (32 KB each) fits the 227 KB of
  // shared memory. d128 without the mask takes 176: O 64, S 88, P 44, and
  // Q (32 KB) with two stages of K and V (44 KB each).
  static constexpr int kBlockN = WsBlockN(kHeadDim, kCausal);
  static constexpr int kStages = kStages_;
  // The launch bounds cap every thread at 65536 / 384 -> 168 registers;
  // setmaxnreg moves the producer's share to the consumers:
  // 24 + 2 * 240 = 3 * 168.
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = 240;
  static_assert(kProducerRegs + kConsumers * kConsumerRegs <=
                    (kConsumers + 1) * (65536 / kThreads / 8 * 8),
                "setmaxnreg asks for more registers than the launch holds");
  static constexpr uint32_t kTurnBarrier = 1;        // named barriers 1, 2: the consumers' turns
  static constexpr int kTileQ = kBlockM * kHeadDim;  // elements
  static constexpr int kTileKV = kBlockN * kHeadDim;
  static constexpr uint32_t kTileQBytes = 2 * kTileQ;
  static constexpr uint32_t kTileKVBytes = 2 * kTileKV;
  static constexpr int kBarriers = 1 + 4 * kStages;
  // Q, kStages x (K, V), the barriers, the consumer warps' scratch, and
  // slack to align the base to 1024 bytes (the 128-byte swizzle pattern
  // repeats every 1024).
  static constexpr int kSmemBytes =
      1024 + kTileQBytes + 2 * kStages * kTileKVBytes + 8 * kBarriers + 8 * kConsumerWarps;
  static_assert(kSmemBytes <= 227 * 1024, "more shared memory than an sm_90 block may opt in to");
};

struct FlashFwdWsParams {
  FlashFwdParams p;
  CUtensorMap map_q, map_k, map_v;
  // 1: the maps' dimensions are (d, head, seq, batch) (BSHD strides),
  // 0: (d, seq, head, batch) (BHSD). Both keep strides non-decreasing.
  int heads_inner;
  TileOrder order;
  // The dense-tail split (ws_plan.h): items [0, full_items) run whole; the
  // rest in `splits` chunks, partials in the workspace (null when off).
  int full_items;
  int splits;
  float* part_o;
  float* part_ml;
};

template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    FlashFwdWsKernel(const __grid_constant__ FlashFwdWsParams wp) {
  using Mainloop = WsMainloop<Traits>;
  constexpr int kD = Traits::kHeadDim;
  const FlashFwdParams& p = wp.p;

  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (sm80::SmemAddr(smem_raw) + 1023u) & ~1023u;
  const WsSmem<Traits> sm = WsSmem<Traits>::At(base);

  const WsCta cta = WsCtaAt(static_cast<int>(blockIdx.x), wp.full_items, wp.splits);
  const WorkTile tile = TileAt(cta.item, wp.order);
  const int m0 = tile.m_block * Traits::kBlockM;
  const int n_all = KvBlocks(p.seq_kv, m0, Traits::kBlockM, Traits::kBlockN, p.causal_offset, Traits::kCausal);
  const int nb0 = cta.chunk ? ChunkBegin(n_all, cta.split, wp.splits) : 0;
  const int n_blocks = (cta.chunk ? ChunkBegin(n_all, cta.split + 1, wp.splits) : n_all) - nb0;
  const int kv0 = nb0 * Traits::kBlockN;
  // Roles from a shfl-broadcast warpgroup index, which ptxas knows to be
  // warp-uniform (48 fewer instructions than threadIdx.x / 128 here).
  const int wg = sm90::WarpUniform(static_cast<int>(threadIdx.x) / 128);

  if (threadIdx.x == 0) sm.InitBarriers();
  __syncthreads();

  if (wg == 0) {
    sm90::SetMaxNRegDec<Traits::kProducerRegs>();
    if (threadIdx.x == 0 && n_blocks > 0) {
      Mainloop::Produce(&wp.map_q, &wp.map_k, &wp.map_v, wp.heads_inner != 0, sm, m0, tile.head,
                        tile.head / p.group, tile.batch, kv0, n_blocks);
    }
  } else {
    sm90::SetMaxNRegInc<Traits::kConsumerRegs>();
    const int cwg = wg - 1;  // consumer: query rows [64 cwg, 64 cwg + 64) of the tile
    float acc[kD / 8][4];
#pragma unroll
    for (int j = 0; j < kD / 8; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
    OnlineSoftmax<Traits::kBlockN / 8> softmax;
    softmax.Init();
    if (n_blocks > 0) Mainloop::Consume(p, sm, cwg, m0, kv0, n_blocks, acc, softmax);

    const int lane = threadIdx.x & 31;
    const int row0 = 64 * cwg + 16 * ((threadIdx.x >> 5) & 3);
    if (cta.chunk) {
      // A chunk: fp32 partials for the merge (an empty chunk leaves m = -inf,
      // l = 0 and zeros).
      float l[2];
      softmax.RowSums(l);
      const int64_t prow = WsPartialRow(cta.item, cta.split, wp.full_items, wp.splits);
      StorePartialTile<kD>(acc, softmax.row_max, l, wp.part_o + prow * kD, wp.part_ml + prow * 2, row0, lane);
      return;
    }

    // The shared epilogue: rows that saw no key (n_blocks == 0 included) are
    // written as zeros.
    float inv[2];
    softmax.Finalize(inv);
    uint16_t* o = static_cast<uint16_t*>(p.o) + tile.batch * p.o_batch_stride +
                  tile.head * p.o_head_stride + m0 * p.o_row_stride;
    const int rows_valid = min(Traits::kBlockM, p.seq_q - m0);
    switch (p.rounding) {
      case kFlashRtna:
        StoreOutputTile<kD, kFlashRtna>(acc, inv, o, p.o_row_stride, row0, rows_valid, lane);
        break;
      case kFlashRtz:
        StoreOutputTile<kD, kFlashRtz>(acc, inv, o, p.o_row_stride, row0, rows_valid, lane);
        break;
      default:
        StoreOutputTile<kD, kFlashRtne>(acc, inv, o, p.o_row_stride, row0, rows_valid, lane);
        break;
    }
  }
}

// The dense-tail merge: for each split item (blockIdx.x) and each of its
// valid rows, the chunks' partials merged in chunk order (MergeChunks, the
// function dense_tail_test holds to an fp64 softmax) and rounded once to bf16
// in the call's mode. One thread per output column, kWsMergeThreads / kD
// rows per block (grid from ws_plan.h).
template <int kD, int kBlockM>
__global__ void __launch_bounds__(256) FlashFwdWsMergeKernel(const __grid_constant__ FlashFwdWsParams wp) {
  static_assert(256 % kD == 0, "whole rows per block");
  static_assert(kBlockM == kWsBlockM, "the partials' layout is ws_plan.h's");
  constexpr int kRowsPerBlock = 256 / kD;
  const FlashFwdParams& p = wp.p;
  const int t = static_cast<int>(blockIdx.x);
  const int r = static_cast<int>(blockIdx.y) * kRowsPerBlock + static_cast<int>(threadIdx.x) / kD;
  const int d = static_cast<int>(threadIdx.x) % kD;
  const WorkTile tile = TileAt(wp.full_items + t, wp.order);
  const int row = tile.m_block * kBlockM + r;
  if (row >= p.seq_q) return;
  const int64_t base = WsPartialRow(wp.full_items + t, 0, wp.full_items, wp.splits) + r;  // chunk 0's row
  const float v = MergeChunks(wp.splits, wp.part_ml + base * 2, int64_t{kBlockM} * 2, wp.part_o + base * kD + d,
                              int64_t{kBlockM} * kD);
  uint16_t* o = static_cast<uint16_t*>(p.o) + tile.batch * p.o_batch_stride + tile.head * p.o_head_stride +
                row * p.o_row_stride + d;
  switch (p.rounding) {
    case kFlashRtna:
      *o = static_cast<uint16_t>(RoundBf16<kFlashRtna>(v));
      break;
    case kFlashRtz:
      *o = static_cast<uint16_t>(RoundBf16<kFlashRtz>(v));
      break;
    default:
      *o = static_cast<uint16_t>(RoundBf16<kFlashRtne>(v));
      break;
  }
}

}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM90_ATTENTION_FLASH_FWD_WS_KERNEL_H_

