// Epilogue of the bf16 MHA forward kernels: O / l rounded once from fp32 to
// bf16 in the requested mode (kernels/gpu/attention/round_bf16.cuh) and
// stored, from the mma accumulator layout that a wgmma accumulator holds per
// warp.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM90_ATTENTION_EPILOGUE_H_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM90_ATTENTION_EPILOGUE_H_

#include <cstdint>

#include "kernels/gpu/attention/round_bf16.cuh"

namespace kernelserve {
namespace gpu {
namespace attention {

// Writes a warp's 16 x kHeadDim accumulator (mma layout) times 1/l for rows
// [row0, row0+16) of a tile; rows at or past seq_q are skipped. inv == 0
// marks a row that saw no key: it is written as exact zeros (its accumulator
// may hold 0 * NaN from a masked key's value in a shared tile).
template <int kHeadDim, int kRounding>
__device__ __forceinline__ void StoreOutputTile(const float (&o)[kHeadDim / 8][4],
                                                const float (&inv)[2], uint16_t* out_base,
                                                int64_t row_stride, int row0, int rows_valid,
                                                int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row0 + g + 8 * r;
    if (row >= rows_valid) continue;
    uint32_t* dst = reinterpret_cast<uint32_t*>(out_base + row * row_stride);
    const bool empty_row = inv[r] == 0.f;
#pragma unroll
    for (int j = 0; j < kHeadDim / 8; ++j) {
      const uint32_t lo = RoundBf16<kRounding>(empty_row ? 0.f : o[j][2 * r] * inv[r]);
      const uint32_t hi = RoundBf16<kRounding>(empty_row ? 0.f : o[j][2 * r + 1] * inv[r]);
      dst[(j * 8 + 2 * t) >> 1] = lo | (hi << 16);
    }
  }
}

// A chunk of the dense-tail split (kernels/gpu/attention/dense_tail.h): a
// warp's rows [row0, row0 + 16) of the unnormalized fp32 accumulator to
// o_base (rows of kHeadDim) and (m, l) to ml_base (rows of 2), every row of
// the tile, for the merge. m is in log2 units, -inf for a row that saw no
// key of the chunk.
template <int kHeadDim>
__device__ __forceinline__ void StorePartialTile(const float (&o)[kHeadDim / 8][4], const float (&m)[2],
                                                 const float (&l)[2], float* o_base, float* ml_base, int row0,
                                                 int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row0 + g + 8 * r;
    float2* dst = reinterpret_cast<float2*>(o_base + row * kHeadDim);
#pragma unroll
    for (int j = 0; j < kHeadDim / 8; ++j) dst[(j * 8 + 2 * t) >> 1] = make_float2(o[j][2 * r], o[j][2 * r + 1]);
    if (t == 0) reinterpret_cast<float2*>(ml_base)[row] = make_float2(m[r], l[r]);
  }
}

}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM90_ATTENTION_EPILOGUE_H_
