// gfx942 device helpers the MFMA kernels share: the operand types of
// v_mfma_f32_16x16x16bf16_1k and the wave-level moves its layout needs. In
// that instruction's layout (wave64), lane l holds A[row l % 16][k 4 (l / 16)
// + i], B[k 4 (l / 16) + i][column l % 16] and D[row 4 (l / 16) + i][column
// l % 16], i = 0..3.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_GFX942_MFMA_H_
#define KERNELSERVE_KERNELS_GPU_ARCH_GFX942_MFMA_H_

#include "kernels/gpu/common/gpu.h"

namespace kernelserve {
namespace gpu {
namespace gfx942 {

typedef float F32x4 __attribute__((ext_vector_type(4)));
typedef float F32x2 __attribute__((ext_vector_type(2)));
typedef short Bf16x4 __attribute__((ext_vector_type(4)));

// D = A B + C on one 16 x 16 x 16 bf16 tile.
__device__ __forceinline__ F32x4 Mfma(Bf16x4 a, Bf16x4 b, F32x4 c) {
  return __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a, b, c, 0, 0, 0);
}

// The value `v` of lane `src` of the wave (ds_bpermute; no LDS allocated).
__device__ __forceinline__ float LaneValue(float v, int src) {
  return __int_as_float(__builtin_amdgcn_ds_bpermute(src << 2, __float_as_int(v)));
}

// Over the four lanes that share l % 16 (l, l ^ 16, l ^ 32, l ^ 48): one row
// of a transposed result, or one column of D.
__device__ __forceinline__ float RowMax(float v) {
  v = fmaxf(v, ShflXor(v, 16));
  return fmaxf(v, ShflXor(v, 32));
}
__device__ __forceinline__ float RowSum(float v) {
  v += ShflXor(v, 16);
  return v + ShflXor(v, 32);
}

}  // namespace gfx942
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_GFX942_MFMA_H_
