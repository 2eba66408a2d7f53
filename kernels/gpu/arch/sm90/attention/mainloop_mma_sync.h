// Mainloop pieces of the mma.sync forward kernel: cp.async tile loads into
// swizzled shared memory (rows past the sequence are zero-filled), S = Q K^T
// and O += P V on m16n8k16 bf16 tensor-core tiles with fp32 accumulation.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM90_ATTENTION_MAINLOOP_MMA_SYNC_H_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM90_ATTENTION_MAINLOOP_MMA_SYNC_H_

#include <cstdint>

#include "kernels/gpu/arch/sm80/mma.cuh"
#include "kernels/gpu/arch/sm90/attention/mma_sync_traits.h"

namespace kernelserve {
namespace gpu {
namespace attention {

template <typename Traits>
struct MmaSyncMainloop {
  static constexpr int kD = Traits::kHeadDim;
  static constexpr int kBlockN = Traits::kBlockN;
  static constexpr int kNTiles = kBlockN / 8;  // 8-key accumulator tiles per row block
  static constexpr int kDTiles = kD / 8;

  // Issues cp.async for a kRows x kD tile starting at `g` (row stride in
  // elements); rows >= rows_valid are filled with zeros and read nothing.
  // A thread copies one 16-byte column chunk of every kRowsPerIter-th row, so
  // its addresses advance by constant steps.
  template <int kRows>
  __device__ __forceinline__ static void LoadTile(uint16_t* smem, const uint16_t* g,
                                                  int64_t row_stride, int rows_valid, int tid) {
    constexpr int kChunksPerRow = kD / 8;
    constexpr int kRowsPerIter = Traits::kThreads / kChunksPerRow;
    static_assert(Traits::kThreads % kChunksPerRow == 0 && kRows % kRowsPerIter == 0,
                  "tile must split evenly over threads");
    const int c = tid % kChunksPerRow;
    const int r0 = tid / kChunksPerRow;
    const uint16_t* src = g + r0 * row_stride + c * 8;
    const int64_t step = kRowsPerIter * row_stride;
    const uint32_t dst0 = sm80::SmemAddr(smem + SwizzledOffset<kD>(r0, c * 8));
#pragma unroll
    for (int i = 0; i < kRows / kRowsPerIter; ++i) {
      const int r = r0 + i * kRowsPerIter;
      // With a multiple of 8 rows per step, r & 7 (the swizzle) is fixed.
      const uint32_t dst = kRowsPerIter % 8 == 0
                               ? dst0 + 2u * static_cast<uint32_t>(i * kRowsPerIter * kD)
                               : sm80::SmemAddr(smem + SwizzledOffset<kD>(r, c * 8));
      const bool valid = r < rows_valid;
      sm80::CpAsync16(dst, valid ? src : g, valid ? 16 : 0);
      src += step;
    }
  }

  static constexpr int kM = Traits::kMTiles;
  static constexpr int kQRegTiles = Traits::kQInRegs ? kM * (kD / 16) : 1;

  // ldmatrix addresses. In the swizzled layout the 16-byte chunk of logical
  // chunk 2*kk + b in row r is (2*kk + b) ^ (r & 7); r & 7 and b are fixed per
  // lane, so the physical chunk is 8*(kk >> 2) + ((2*(kk & 3)) ^ y) with y a
  // lane constant. Four base addresses per operand (one per kk & 3) then reach
  // every fragment with a compile-time immediate offset, instead of the
  // compiler keeping dozens of loop-invariant addresses in registers.
  struct FragAddrs {
    uint32_t q[4];  // Q fragment rows row0 + (lane & 15), chunk parity lane >> 4
    uint32_t k[4];  // K fragment keys (lane & 7) + 8*(lane >> 4), parity (lane >> 3) & 1
    uint32_t v[4];  // V fragment keys (lane & 7) + 8*((lane >> 3) & 1), parity lane >> 4
  };

  __device__ __forceinline__ static void MakeFragAddrs(const uint16_t* sq, const uint16_t* sk,
                                                       const uint16_t* sv, int row0, int lane,
                                                       FragAddrs& f) {
    const int x = lane & 7;
    const int yq = (lane >> 4) ^ x;
    const int yk = ((lane >> 3) & 1) ^ x;
    const int yv = (lane >> 4) ^ x;
    const int q_row = row0 + (lane & 15);
    const int k_row = x + ((lane >> 4) << 3);
    const int v_row = x + (((lane >> 3) & 1) << 3);
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      f.q[c] = sm80::SmemAddr(sq + q_row * kD + (((2 * c) ^ yq) << 3));
      f.k[c] = sm80::SmemAddr(sk + k_row * kD + (((2 * c) ^ yk) << 3));
      f.v[c] = sm80::SmemAddr(sv + v_row * kD + (((2 * c) ^ yv) << 3));
    }
  }

  // Byte offset of 16-row step `r16` and 16-column step `c16` from a base.
  static constexpr uint32_t Step(int r16, int c16) {
    return static_cast<uint32_t>(2 * (r16 * 16 * kD + (c16 >> 2) * 64));
  }

  // A fragment of Q for row tile mt, columns [16*kk, 16*kk+16).
  __device__ __forceinline__ static void LoadQFragment(const FragAddrs& f, int mt, int kk,
                                                       uint32_t (&a)[4]) {
    sm80::LdMatrixX4(f.q[kk & 3] + Step(mt, kk), a);
  }

  // s = Q K^T for this warp's kM row tiles against the kBlockN keys in K's
  // shared tile. Each K fragment read from shared memory feeds kM mmas.
  // q_regs holds the Q fragments (index mt * kD/16 + kk) when
  // Traits::kQInRegs; otherwise they are read from shared memory.
  __device__ __forceinline__ static void QK(const uint32_t (&q_regs)[kQRegTiles][4],
                                            const FragAddrs& f, float (&s)[kM][kNTiles][4]) {
#pragma unroll
    for (int mt = 0; mt < kM; ++mt) {
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) s[mt][j][0] = s[mt][j][1] = s[mt][j][2] = s[mt][j][3] = 0.f;
    }
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      uint32_t a[kM][4];
#pragma unroll
      for (int mt = 0; mt < kM; ++mt) {
        if constexpr (Traits::kQInRegs) {
#pragma unroll
          for (int i = 0; i < 4; ++i) a[mt][i] = q_regs[mt * (kD / 16) + kk][i];
        } else {
          LoadQFragment(f, mt, kk, a[mt]);
        }
      }
#pragma unroll
      for (int nn = 0; nn < kBlockN / 16; ++nn) {
        // Matrices: keys [0,8) x d [0,8), keys [0,8) x d [8,16), keys [8,16) x ...
        uint32_t b[4];
        sm80::LdMatrixX4(f.k[kk & 3] + Step(nn, kk), b);
#pragma unroll
        for (int mt = 0; mt < kM; ++mt) {
          sm80::MmaBf16(s[mt][2 * nn], a[mt], b[0], b[1]);
          sm80::MmaBf16(s[mt][2 * nn + 1], a[mt], b[2], b[3]);
        }
      }
    }
  }

  // o += P V, P (probabilities in s, accumulator layout) rounded to bf16 as
  // the A operand, V through ldmatrix.trans; each V fragment feeds kM mmas.
  __device__ __forceinline__ static void PV(const float (&s)[kM][kNTiles][4], const FragAddrs& f,
                                            float (&o)[kM][kDTiles][4]) {
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      uint32_t a[kM][4];
#pragma unroll
      for (int mt = 0; mt < kM; ++mt) {
        a[mt][0] = sm80::PackBf16x2Rn(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        a[mt][1] = sm80::PackBf16x2Rn(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        a[mt][2] = sm80::PackBf16x2Rn(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        a[mt][3] = sm80::PackBf16x2Rn(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dd = 0; dd < kD / 16; ++dd) {
        // Matrices: keys [0,8) x d [0,8), keys [8,16) x d [0,8), keys [0,8) x d [8,16), ...
        uint32_t b[4];
        sm80::LdMatrixX4Trans(f.v[dd & 3] + Step(kk, dd), b);
#pragma unroll
        for (int mt = 0; mt < kM; ++mt) {
          sm80::MmaBf16(o[mt][2 * dd], a[mt], b[0], b[1]);
          sm80::MmaBf16(o[mt][2 * dd + 1], a[mt], b[2], b[3]);
        }
      }
    }
  }
};

}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM90_ATTENTION_MAINLOOP_MMA_SYNC_H_
