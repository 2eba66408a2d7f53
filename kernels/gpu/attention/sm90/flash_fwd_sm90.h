// Hopper (sm_90a) bf16 MHA forward, head dim 128: both matrix products on
// wgmma. Two warpgroups of 64 query rows each (kBlockM = 128) walk the keys
// kBlockN = 128 at a time. Tiles are stored in the 128-byte-swizzled layout
// wgmma reads directly: [2 column blocks of 64][rows][64], so Q and K are
// K-major operands of S = Q K^T and V is the MN-major (transposed) operand
// of O += P V, with P fed from registers. K and V are double-buffered with
// cp.async one block ahead. Same masking, softmax and epilogue as the
// mma.sync kernel (kernels/cuda/attention/*.h), whose accumulator layout per
// warp is identical.
#ifndef KERNELSERVE_KERNELS_CUDA_ATTENTION_SM90_FLASH_FWD_SM90_H_
#define KERNELSERVE_KERNELS_CUDA_ATTENTION_SM90_FLASH_FWD_SM90_H_

#include <math.h>

#include <cstdint>

#include "kernels/gpu/arch/sm80/mma.cuh"
#include "kernels/gpu/arch/sm90/wgmma.cuh"
#include "kernels/gpu/attention/epilogue.h"
#include "kernels/gpu/attention/flash_params.h"
#include "kernels/gpu/attention/softmax.h"
#include "kernels/gpu/attention/tile_scheduler.h"

namespace kernelserve {
namespace gpu {
namespace sm90 {

// kWarpgroups warpgroups of 64 query rows share each K/V tile of kBlockN keys.
// kMinBlocks: resident blocks per SM the launch bounds ask for.
template <bool kCausal_, int kWarpgroups_, int kBlockN_, int kMinBlocks_>
struct Sm90Traits {
  static constexpr bool kCausal = kCausal_;
  static constexpr int kHeadDim = 128;
  static constexpr int kWarpgroups = kWarpgroups_;
  static constexpr int kThreads = 128 * kWarpgroups;
  static constexpr int kBlockM = 64 * kWarpgroups;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kMinBlocks = kMinBlocks_;
  static constexpr int kTileQ = kBlockM * kHeadDim;  // elements
  static constexpr int kTileKV = kBlockN * kHeadDim;
  // Q, 2 x K, 2 x V, plus slack to align the base to 1024 bytes.
  static constexpr int kSmemBytes = 2 * (kTileQ + 4 * kTileKV) + 1024;
};

// Element offset of (row, col) in a [2][rows][64] swizzled tile.
template <int kRows>
__device__ __forceinline__ int TileOffset(int row, int col) {
  return (col >> 6) * (kRows * 64) + row * 64 + ((((col >> 3) & 7) ^ (row & 7)) << 3) + (col & 7);
}

// cp.async of a kRows x 128 tile; rows >= rows_valid are zero-filled.
template <int kRows, int kThreads>
__device__ __forceinline__ void LoadTileSw128(uint16_t* smem, const uint16_t* g,
                                              int64_t row_stride, int rows_valid, int tid) {
  constexpr int kRowsPerIter = kThreads / 16;  // 16 chunks of 16 bytes per row
  static_assert(kRows % kRowsPerIter == 0 && kRowsPerIter % 8 == 0, "tile split");
  const int c = tid & 15;
  const int r0 = tid >> 4;
  const uint16_t* src = g + r0 * row_stride + c * 8;
  const int64_t step = kRowsPerIter * row_stride;
  const uint32_t dst0 = sm80::SmemAddr(smem + TileOffset<kRows>(r0, c * 8));
#pragma unroll
  for (int i = 0; i < kRows / kRowsPerIter; ++i) {
    const int r = r0 + i * kRowsPerIter;
    const bool valid = r < rows_valid;
    // r & 7 is fixed across i: only the row advances.
    sm80::CpAsync16(dst0 + 2u * static_cast<uint32_t>(i * kRowsPerIter * 64), valid ? src : g,
              valid ? 16 : 0);
    src += step;
  }
}

template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreads, Traits::kMinBlocks)
    FlashFwdSm90Kernel(const FlashFwdParams p) {
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kD = Traits::kHeadDim;
  constexpr int kNTiles = kBlockN / 8;

  extern __shared__ uint8_t smem_raw[];
  uint16_t* sq = reinterpret_cast<uint16_t*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~static_cast<uintptr_t>(1023));
  // Buffers: K[0], K[1], V[0], V[1] after Q (selected arithmetically: a
  // run-time index into a pointer array would live in local memory).
  uint16_t* const sk0 = sq + Traits::kTileQ;
  uint16_t* const sv0 = sk0 + 2 * Traits::kTileKV;

  const WorkTile tile = SingleTileScheduler<kBlockM>::Get();
  const int tid = threadIdx.x;
  const int wg = tid >> 7;               // warpgroup: query rows [64 wg, 64 wg + 64)
  const int warp_in_wg = (tid >> 5) & 3;
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

  int n_blocks = (p.seq_kv + kBlockN - 1) / kBlockN;
  if (Traits::kCausal) {
    const int last_key = min(p.seq_kv - 1, m0 + kBlockM - 1 + p.causal_offset);
    n_blocks = last_key < 0 ? 0 : min(n_blocks, last_key / kBlockN + 1);
  }
  const int first_masked_key = Traits::kCausal ? m0 + p.causal_offset + 1 : p.seq_kv;

  float acc[kD / 8][4];
  float s[kNTiles][4];
#pragma unroll
  for (int j = 0; j < kD / 8; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
#pragma unroll
  for (int j = 0; j < kNTiles; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
  OnlineSoftmax<kNTiles> softmax;
  softmax.Init();
  const int row0 = 64 * wg + 16 * warp_in_wg;  // this warp's first row in the tile

  if (n_blocks > 0) {
    LoadTileSw128<kBlockM, Traits::kThreads>(sq, q, p.q_row_stride, rows_valid, tid);
    const int valid0 = min(kBlockN, p.seq_kv);
    LoadTileSw128<kBlockN, Traits::kThreads>(sk0, k, p.k_row_stride, valid0, tid);
    LoadTileSw128<kBlockN, Traits::kThreads>(sv0, v, p.v_row_stride, valid0, tid);
    sm80::CpAsyncCommit();

    const uint32_t sq_addr = sm80::SmemAddr(sq) + 2u * (64 * wg) * 64;  // this warpgroup's 64 rows
    for (int nb = 0; nb < n_blocks; ++nb) {
      const int buf = nb & 1;
      const int n0 = nb * kBlockN;
      if (nb + 1 < n_blocks) {
        const int n1 = n0 + kBlockN;
        const int valid1 = min(kBlockN, p.seq_kv - n1);
        uint16_t* const sk1 = sk0 + (buf ^ 1) * Traits::kTileKV;
        uint16_t* const sv1 = sv0 + (buf ^ 1) * Traits::kTileKV;
        LoadTileSw128<kBlockN, Traits::kThreads>(sk1, k + n1 * p.k_row_stride, p.k_row_stride,
                                                 valid1, tid);
        LoadTileSw128<kBlockN, Traits::kThreads>(sv1, v + n1 * p.v_row_stride, p.v_row_stride,
                                                 valid1, tid);
      }
      sm80::CpAsyncCommit();
      sm80::CpAsyncWait<1>();  // Q, K[nb], V[nb] have landed
      FenceProxyAsync();
      __syncthreads();

      // S = Q K^T: 8 k-steps of 16 over d; k-step kk lives in column block
      // kk / 4 at byte offset 32 * (kk % 4) within the 128-byte rows.
      const uint32_t sk_addr = sm80::SmemAddr(sk0 + buf * Traits::kTileKV);
      FenceOperand(s);
      WgmmaFence();
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk) {
        const uint32_t k_off = 32u * (kk & 3);
        const uint32_t q_blk = (kk >> 2) * 2u * (kBlockM * 64);  // bytes to Q's column block
        const uint32_t k_blk = (kk >> 2) * 2u * (kBlockN * 64);
        const uint64_t da = MakeSmemDesc(sq_addr + q_blk + k_off, 16, 1024);
        const uint64_t db = MakeSmemDesc(sk_addr + k_blk + k_off, 16, 1024);
        WgmmaSS<kBlockN, Bf16>(s, da, db, kk > 0 ? 1 : 0);
      }
      WgmmaCommit();
      WgmmaWait<0>();
      FenceOperand(s);

      if (n0 + kBlockN > p.seq_kv || n0 + kBlockN > first_masked_key) {
        MaskScores<Traits::kCausal>(s, n0, m0 + row0, p.seq_kv, p.causal_offset, lane);
      }
      float alpha[2];
      softmax.Update(s, p.scale_log2, alpha);
#pragma unroll
      for (int j = 0; j < kD / 8; ++j) {
        acc[j][0] *= alpha[0];
        acc[j][1] *= alpha[0];
        acc[j][2] *= alpha[1];
        acc[j][3] *= alpha[1];
      }

      // O += P V: 8 k-steps of 16 keys; V is the transposed (MN-major) B
      // operand: its two 64-wide d blocks lie kBlockN * 128 bytes apart
      // (lbo), 8-key groups 1024 bytes apart (sbo).
      const uint32_t sv_addr = sm80::SmemAddr(sv0 + buf * Traits::kTileKV);
      // All of P is converted before the fence: registers feeding a wgmma
      // must not be written between the fence and the instruction.
      uint32_t pa[kBlockN / 16][4];
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) {
        pa[kk][0] = sm80::PackBf16x2Rn(s[2 * kk][0], s[2 * kk][1]);
        pa[kk][1] = sm80::PackBf16x2Rn(s[2 * kk][2], s[2 * kk][3]);
        pa[kk][2] = sm80::PackBf16x2Rn(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        pa[kk][3] = sm80::PackBf16x2Rn(s[2 * kk + 1][2], s[2 * kk + 1][3]);
      }
      FenceOperand(pa);
      FenceOperand(acc);
      WgmmaFence();
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) {
        const uint64_t db = MakeSmemDesc(sv_addr + kk * 16u * 128u, kBlockN * 128, 1024);
        WgmmaRS<128, Bf16, true>(acc, pa[kk], db, 1);
      }
      WgmmaCommit();
      WgmmaWait<0>();
      FenceOperand(acc);
      __syncthreads();  // all warpgroups are done with K[nb], V[nb] before they are reloaded
    }
  }

  float inv[2];
  softmax.Finalize(inv);
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

// Instantiated with two warpgroups over 128-key tiles, one block per SM: on
// the H200 it beat one warpgroup over 64-key tiles at two blocks per SM by
// 3-6 % at 7 of 8 seed cases (bench/NOTES.md).
template <bool kCausal, int kWarpgroups, int kBlockN, int kMinBlocks>
cudaError_t LaunchFlashFwdSm90(const FlashFwdParams& params, cudaStream_t stream) {
  using Traits = Sm90Traits<kCausal, kWarpgroups, kBlockN, kMinBlocks>;
  auto kernel = &FlashFwdSm90Kernel<Traits>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       Traits::kSmemBytes);
  if (e != cudaSuccess) return e;
  const dim3 grid = SingleTileScheduler<Traits::kBlockM>::Grid(params);
  kernel<<<grid, Traits::kThreads, Traits::kSmemBytes, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace sm90
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_CUDA_ATTENTION_SM90_FLASH_FWD_SM90_H_
