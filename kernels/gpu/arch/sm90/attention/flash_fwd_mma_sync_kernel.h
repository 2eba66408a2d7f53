// The bf16 MHA forward kernel on mma.sync (FA2-style; head dim 256):
// one thread block per (query tile, head, batch) from the tile scheduler; K
// and V tiles streamed through shared memory with cp.async so that V[n]
// loads during S = Q K[n]^T and K[n+1] during O += P V[n].
// Each of the four warps owns 16 * kMTiles query rows.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM90_ATTENTION_FLASH_FWD_MMA_SYNC_KERNEL_H_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM90_ATTENTION_FLASH_FWD_MMA_SYNC_KERNEL_H_

#include <cstdint>

#include "kernels/gpu/arch/sm80/mma.cuh"
#include "kernels/gpu/arch/sm90/attention/epilogue.h"
#include "kernels/gpu/arch/sm90/attention/mainloop_mma_sync.h"
#include "kernels/gpu/arch/sm90/attention/mma_sync_traits.h"
#include "kernels/gpu/arch/sm90/attention/softmax.h"
#include "kernels/gpu/attention/flash_params.h"
#include "kernels/gpu/attention/tile_scheduler.h"

namespace kernelserve {
namespace gpu {
namespace attention {

template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreads, Traits::kMinBlocksPerSm)
    FlashFwdMmaSyncKernel(const FlashFwdParams p) {
  using ML = MmaSyncMainloop<Traits>;
  constexpr int kD = Traits::kHeadDim;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;

  extern __shared__ __align__(128) uint16_t smem[];
  uint16_t* sq = smem;
  uint16_t* sk = sq + Traits::kSmemQ;
  uint16_t* sv = sk + Traits::kSmemK;

  const WorkTile tile = SingleTileScheduler<kBlockM>::Get();
  const int tid = threadIdx.x;
  const int warp = tid >> 5;
  const int lane = tid & 31;
  const int m0 = tile.m_block * kBlockM;
  const int kv_head = tile.head / p.group;

  const uint16_t* q = static_cast<const uint16_t*>(p.q) + tile.batch * p.q_batch_stride +
                      tile.head * p.q_head_stride + m0 * p.q_row_stride;
  const uint16_t* k = static_cast<const uint16_t*>(p.k) + tile.batch * p.k_batch_stride +
                      kv_head * p.k_head_stride;
  const uint16_t* v = static_cast<const uint16_t*>(p.v) + tile.batch * p.v_batch_stride +
                      kv_head * p.v_head_stride;
  uint16_t* o = static_cast<uint16_t*>(p.o) + tile.batch * p.o_batch_stride +
                tile.head * p.o_head_stride + m0 * p.o_row_stride;
  const int rows_valid = min(kBlockM, p.seq_q - m0);

  const int n_blocks = KvBlocks(p.seq_kv, m0, kBlockM, kBlockN, p.causal_offset, Traits::kCausal);
  // The first key block that some row of this tile cannot fully see.
  const int first_masked_key = Traits::kCausal ? m0 + p.causal_offset + 1 : p.seq_kv;

  constexpr int kM = Traits::kMTiles;
  float acc[kM][kD / 8][4];
  OnlineSoftmax<kBlockN / 8> softmax[kM];
#pragma unroll
  for (int mt = 0; mt < kM; ++mt) {
#pragma unroll
    for (int j = 0; j < kD / 8; ++j) {
      acc[mt][j][0] = acc[mt][j][1] = acc[mt][j][2] = acc[mt][j][3] = 0.f;
    }
    softmax[mt].Init();
  }
  const int row0 = warp * 16 * kM;  // this warp's first row within the tile

  if (n_blocks > 0) {
    ML::template LoadTile<kBlockM>(sq, q, p.q_row_stride, rows_valid, tid);
    ML::template LoadTile<kBlockN>(sk, k, p.k_row_stride, min(kBlockN, p.seq_kv), tid);
    sm80::CpAsyncCommit();

    typename ML::FragAddrs frag;
    ML::MakeFragAddrs(sq, sk, sv, row0, lane, frag);
    uint32_t q_regs[ML::kQRegTiles][4];
    if constexpr (Traits::kQInRegs) {
      sm80::CpAsyncWait<0>();
      __syncthreads();
#pragma unroll
      for (int mt = 0; mt < kM; ++mt) {
#pragma unroll
        for (int kk = 0; kk < kD / 16; ++kk) {
          ML::LoadQFragment(frag, mt, kk, q_regs[mt * (kD / 16) + kk]);
        }
      }
    }

    for (int nb = 0; nb < n_blocks; ++nb) {
      const int n0 = nb * kBlockN;
      // V[nb] streams in while S is computed.
      ML::template LoadTile<kBlockN>(sv, v + n0 * p.v_row_stride, p.v_row_stride,
                                     min(kBlockN, p.seq_kv - n0), tid);
      sm80::CpAsyncCommit();
      sm80::CpAsyncWait<1>();  // Q and K[nb] have landed
      __syncthreads();

      float s[kM][kBlockN / 8][4];
      ML::QK(q_regs, frag, s);
      __syncthreads();  // every warp is done with K[nb]

      if (nb + 1 < n_blocks) {
        const int n1 = n0 + kBlockN;
        ML::template LoadTile<kBlockN>(sk, k + n1 * p.k_row_stride, p.k_row_stride,
                                       min(kBlockN, p.seq_kv - n1), tid);
      }
      sm80::CpAsyncCommit();  // possibly empty: keeps the group count uniform

      const bool need_mask = n0 + kBlockN > p.seq_kv || n0 + kBlockN > first_masked_key;
#pragma unroll
      for (int mt = 0; mt < kM; ++mt) {
        if (need_mask) MaskScores<Traits::kCausal>(s[mt], n0, m0 + row0 + 16 * mt, p.seq_kv, p.causal_offset, lane);
        float alpha[2];
        softmax[mt].Update(s[mt], p.scale_log2, alpha);
#pragma unroll
        for (int j = 0; j < kD / 8; ++j) {
          acc[mt][j][0] *= alpha[0];
          acc[mt][j][1] *= alpha[0];
          acc[mt][j][2] *= alpha[1];
          acc[mt][j][3] *= alpha[1];
        }
      }

      sm80::CpAsyncWait<1>();  // V[nb] has landed
      __syncthreads();
      ML::PV(s, frag, acc);
      __syncthreads();  // every warp is done with V[nb]
    }
  }

#pragma unroll
  for (int mt = 0; mt < kM; ++mt) {
    float inv[2];
    softmax[mt].Finalize(inv);
    const int r0 = row0 + 16 * mt;
    switch (p.rounding) {
      case kFlashRtna:
        StoreOutputTile<kD, kFlashRtna>(acc[mt], inv, o, p.o_row_stride, r0, rows_valid, lane);
        break;
      case kFlashRtz:
        StoreOutputTile<kD, kFlashRtz>(acc[mt], inv, o, p.o_row_stride, r0, rows_valid, lane);
        break;
      default:
        StoreOutputTile<kD, kFlashRtne>(acc[mt], inv, o, p.o_row_stride, r0, rows_valid, lane);
        break;
    }
  }
}

}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM90_ATTENTION_FLASH_FWD_MMA_SYNC_KERNEL_H_
