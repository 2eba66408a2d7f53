// The fp32 merge of the dense-tail KV split, one output element at a time:
// the same inline function runs in the merge kernels (one per head dim) and
// in the CPU test that holds it to an fp64 single-pass softmax
// (dense_tail_merge_test).
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_GFX942_ATTENTION_DENSE_TAIL_MERGE_H_
#define KERNELSERVE_KERNELS_GPU_ARCH_GFX942_ATTENTION_DENSE_TAIL_MERGE_H_

#include <cstdint>

#include "kernels/gpu/common/host_device.h"

namespace kernelserve {
namespace gpu {
namespace attention {
namespace gfx942 {

// Chunk s of one query row left (m_s, l_s) at ml[s * ml_stride + {0, 1}]
// (m_s its largest score in log2 units, -Inf when the chunk had no key for
// the row; l_s the sum of 2^(t - m_s) over its keys) and the unnormalized
// O_s = sum 2^(t - m_s) v at o[s * o_stride]. The row's output is
// sum_s 2^(m_s - M) O_s / sum_s 2^(m_s - M) l_s with M = max_s m_s, summed in
// chunk order (deterministic); 0 when no chunk saw a key (the oracle's
// output for a row that sees none).
KS_HOST_DEVICE float MergeChunks(int chunks, const float* ml, int64_t ml_stride, const float* o, int64_t o_stride) {
  float m_max = -__builtin_inff();
  for (int s = 0; s < chunks; ++s) {
    const float m = ml[s * ml_stride];
    m_max = m > m_max ? m : m_max;
  }
  if (m_max == -__builtin_inff()) return 0.f;
  float l = 0.f, acc = 0.f;
  for (int s = 0; s < chunks; ++s) {
    const float m = ml[s * ml_stride];
    if (m == -__builtin_inff()) continue;  // an empty chunk's O and l are 0; 2^(-Inf - M) is skipped, not computed
    const float w = __builtin_exp2f(m - m_max);
    l += w * ml[s * ml_stride + 1];
    acc += w * o[s * o_stride];
  }
  return acc / l;
}

}  // namespace gfx942
}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_GFX942_ATTENTION_DENSE_TAIL_MERGE_H_
