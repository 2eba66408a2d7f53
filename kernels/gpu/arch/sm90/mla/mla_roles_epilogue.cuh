// The roles kernel's epilogue: warp `wq` of warpgroup `half` holds rows
// [16 wq, +16) of output columns [256 half, +256) in the m64n256 accumulator
// layout. One split: O / l, rounded to bf16 (rows past a request's window
// are zeros); several: the fp32 partials (MlaPartials::kF32) and (half 0)
// the row's max and sum for the merge.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM90_MLA_MLA_ROLES_EPILOGUE_CUH_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM90_MLA_MLA_ROLES_EPILOGUE_CUH_

#include <cstdint>

#include "kernels/gpu/common/bf16.cuh"
#include "kernels/gpu/mla/mla_decode_params.h"

namespace kernelserve {
namespace gpu {
namespace mla {

__device__ __forceinline__ void WriteRows(const KParams& p, const float (&acc)[128], const float (&l2)[2],
                                          const float (&m2)[2], int b, int group, int split, int row0, int nrows,
                                          int ql, int wq, int half, int lane) {
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int row = wq * 16 + hf * 8 + (lane >> 2);
    if (row >= nrows) continue;
    const int r = row0 + row;
    const int col0 = half * 256 + (lane & 3) * 2;
    if (p.splits == 1) {
      uint16_t* o = p.out + (static_cast<int64_t>(b) * p.rows + r) * kDL + col0;
      const bool live = r / p.heads < ql;
      const float inv = p.out_scale / l2[hf];
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        const uint32_t v = live ? PackBf16x2(acc[4 * j + 2 * hf] * inv, acc[4 * j + 2 * hf + 1] * inv, p.rounding)
                                : 0u;
        *reinterpret_cast<uint32_t*>(o + j * 8) = v;
      }
    } else {
      const int64_t pi = ((static_cast<int64_t>(b) * p.row_groups + group) * p.splits + split) * kRows + row;
      float* o = p.part_o + pi * kDL + col0;
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        *reinterpret_cast<float2*>(o + j * 8) = make_float2(acc[4 * j + 2 * hf], acc[4 * j + 2 * hf + 1]);
      }
      if (half == 0 && (lane & 3) == 0) {
        p.part_ml[pi * 2] = m2[hf];
        p.part_ml[pi * 2 + 1] = l2[hf];
      }
    }
  }
}

}  // namespace mla
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM90_MLA_MLA_ROLES_EPILOGUE_CUH_
