// Mainloop pieces of the mma.sync forward kernel: cp.async tile loads into
// swizzled shared memory (rows past the sequence are zero-filled), S = Q K^T
// and O += P V on m16n8k16 bf16 tensor-core tiles with fp32 accumulation.
#ifndef KERNELSERVE_KERNELS_CUDA_ATTENTION_MAINLOOP_H_
#define KERNELSERVE_KERNELS_CUDA_ATTENTION_MAINLOOP_H_

#include <cstdint>

#include "kernels/cuda/attention/kernel_traits.h"
#include "kernels/cuda/attention/ptx.h"

namespace kernelserve {
namespace cuda {

template <typename Traits>
struct Mainloop {
  static constexpr int kD = Traits::kHeadDim;
  static constexpr int kBlockN = Traits::kBlockN;
  static constexpr int kNTiles = kBlockN / 8;  // 8-key accumulator tiles per row block
  static constexpr int kDTiles = kD / 8;

  // Issues cp.async for a kRows x kD tile starting at `g` (row stride in
  // elements); rows >= rows_valid are filled with zeros and read nothing.
  template <int kRows>
  __device__ __forceinline__ static void LoadTile(uint16_t* smem, const uint16_t* g,
                                                  int64_t row_stride, int rows_valid, int tid) {
    constexpr int kChunksPerRow = kD / 8;
    constexpr int kChunks = kRows * kChunksPerRow;
    static_assert(kChunks % Traits::kThreads == 0, "tile must split evenly over threads");
#pragma unroll
    for (int i = 0; i < kChunks / Traits::kThreads; ++i) {
      const int idx = tid + i * Traits::kThreads;
      const int r = idx / kChunksPerRow;
      const int c = idx % kChunksPerRow;
      const bool valid = r < rows_valid;
      const uint16_t* src = g + (valid ? r * row_stride : 0) + c * 8;
      CpAsync16(SmemAddr(smem + SwizzledOffset<kD>(r, c * 8)), src, valid ? 16 : 0);
    }
  }

  // A fragment of Q for rows [row0, row0+16), columns [k0, k0+16).
  __device__ __forceinline__ static void LoadQFragment(const uint16_t* sq, int row0, int k0,
                                                       int lane, uint32_t (&a)[4]) {
    const int row = row0 + (lane & 15);
    const int col = k0 + ((lane >> 4) << 3);
    LdMatrixX4(SmemAddr(sq + SwizzledOffset<kD>(row, col)), a);
  }

  // s = Q K^T for this warp's 16 rows against the kBlockN keys in sk.
  // q_regs holds the Q fragments when Traits::kQInRegs; otherwise they are
  // read from sq.
  __device__ __forceinline__ static void QK(const uint32_t (&q_regs)[Traits::kQInRegs ? kD / 16 : 1][4],
                                            const uint16_t* sq, const uint16_t* sk, int row0,
                                            int lane, float (&s)[kNTiles][4]) {
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      uint32_t a[4];
      if constexpr (Traits::kQInRegs) {
        a[0] = q_regs[kk][0];
        a[1] = q_regs[kk][1];
        a[2] = q_regs[kk][2];
        a[3] = q_regs[kk][3];
      } else {
        LoadQFragment(sq, row0, kk * 16, lane, a);
      }
#pragma unroll
      for (int nn = 0; nn < kBlockN / 16; ++nn) {
        // Matrices: keys [0,8) x d [0,8), keys [0,8) x d [8,16), keys [8,16) x ...
        const int key = nn * 16 + (lane & 7) + ((lane >> 4) << 3);
        const int col = kk * 16 + (((lane >> 3) & 1) << 3);
        uint32_t b[4];
        LdMatrixX4(SmemAddr(sk + SwizzledOffset<kD>(key, col)), b);
        MmaBf16(s[2 * nn], a, b[0], b[1]);
        MmaBf16(s[2 * nn + 1], a, b[2], b[3]);
      }
    }
  }

  // o += P V, P (probabilities in s, accumulator layout) rounded to bf16 as
  // the A operand, V from sv through ldmatrix.trans.
  __device__ __forceinline__ static void PV(const float (&s)[kNTiles][4], const uint16_t* sv,
                                            int lane, float (&o)[kDTiles][4]) {
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      uint32_t a[4];
      a[0] = PackBf16x2(s[2 * kk][0], s[2 * kk][1]);
      a[1] = PackBf16x2(s[2 * kk][2], s[2 * kk][3]);
      a[2] = PackBf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      a[3] = PackBf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int dd = 0; dd < kD / 16; ++dd) {
        // Matrices: keys [0,8) x d [0,8), keys [8,16) x d [0,8), keys [0,8) x d [8,16), ...
        const int key = kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
        const int col = dd * 16 + ((lane >> 4) << 3);
        uint32_t b[4];
        LdMatrixX4Trans(SmemAddr(sv + SwizzledOffset<kD>(key, col)), b);
        MmaBf16(o[2 * dd], a, b[0], b[1]);
        MmaBf16(o[2 * dd + 1], a, b[2], b[3]);
      }
    }
  }

  // Sets masked scores to -inf: keys past seq_kv, and under the causal mask
  // keys j > i + causal_offset for query row i.
  __device__ __forceinline__ static void Mask(float (&s)[kNTiles][4], int n0, int q_row0,
                                              int seq_kv, int causal_offset, int lane) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = q_row0 + g + 8 * r;
      int limit = seq_kv;  // first masked key
      if (Traits::kCausal) limit = min(limit, row + causal_offset + 1);
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key = n0 + j * 8 + 2 * t + e;
          if (key >= limit) s[j][2 * r + e] = -INFINITY;
        }
      }
    }
  }
};

}  // namespace cuda
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_CUDA_ATTENTION_MAINLOOP_H_
