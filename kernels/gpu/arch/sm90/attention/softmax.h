// Online softmax over the score tile a warp holds in mma accumulator layout:
// thread (g = lane/4, t = lane%4) owns rows g and g+8 and, in each 8-column
// tile j, columns 8j+2t and 8j+2t+1. Scores stay raw; the row max is tracked
// in base-2 units (raw max * scale*log2 e, the scale being positive).
//
// Non-finite values follow IEEE as the fp64 oracle does: a NaN score makes
// its row's sum NaN and hence the whole row NaN; masked scores are -inf and
// contribute exactly 0; a row that sees no key keeps l = 0 and is written as 0.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM90_ATTENTION_SOFTMAX_H_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM90_ATTENTION_SOFTMAX_H_

#include <math.h>

#include "kernels/gpu/common/gpu.h"

namespace kernelserve {
namespace gpu {
namespace attention {

// Sets masked scores to -inf in that layout: keys at or past seq_kv and,
// under the causal mask, keys j > i + causal_offset for query row i (rows
// q_row0 + g and q_row0 + g + 8; keys from n0). Every attention kernel masks
// through this one definition.
template <bool kCausal, int kNTiles>
__device__ __forceinline__ void MaskScores(float (&s)[kNTiles][4], int n0, int q_row0, int seq_kv,
                                           int causal_offset, int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = q_row0 + g + 8 * r;
    int limit = seq_kv;  // first masked key
    if (kCausal) limit = min(limit, row + causal_offset + 1);
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

template <int kNTiles>
struct OnlineSoftmax {
  float row_max[2];  // base-2 units; -inf until a key is seen
  float row_sum[2];  // this thread's partial sums; reduced across the quad at the end

  __device__ __forceinline__ void Init() {
    row_max[0] = row_max[1] = -INFINITY;
    row_sum[0] = row_sum[1] = 0.f;
  }

  // Turns scores s into probabilities in place and returns the factor by
  // which each row's accumulator must be rescaled.
  __device__ __forceinline__ void Update(float (&s)[kNTiles][4], float scale_log2,
                                         float (&alpha)[2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float m = -INFINITY;
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) m = fmaxf(m, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
      m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, 1));
      m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, 2));
      // fmaxf drops NaN, so m is never NaN; NaN scores reach Exp2 below.
      const float m_new = fmaxf(row_max[r], m * scale_log2);
      alpha[r] = row_max[r] == -INFINITY ? 0.f : Exp2Approx(row_max[r] - m_new);
      row_max[r] = m_new;
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float p = Exp2Approx(fmaf(s[j][2 * r + e], scale_log2, -m_use));
          s[j][2 * r + e] = p;
          sum += p;
        }
      }
      row_sum[r] = row_sum[r] * alpha[r] + sum;
    }
  }

  // l per row, summed over the quad (the dense-tail partials' l).
  __device__ __forceinline__ void RowSums(float (&l)[2]) const {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l[r] = row_sum[r];
      l[r] += __shfl_xor_sync(0xffffffff, l[r], 1);
      l[r] += __shfl_xor_sync(0xffffffff, l[r], 2);
    }
  }

  // 1/l per row (0 for rows that saw no key; NaN stays NaN).
  __device__ __forceinline__ void Finalize(float (&inv)[2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = row_sum[r];
      l += __shfl_xor_sync(0xffffffff, l, 1);
      l += __shfl_xor_sync(0xffffffff, l, 2);
      inv[r] = l == 0.f ? 0.f : 1.f / l;
    }
  }
};

}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM90_ATTENTION_SOFTMAX_H_
