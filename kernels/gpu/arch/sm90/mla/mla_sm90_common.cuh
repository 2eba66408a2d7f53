// Shared by the sm_90a MLA decode kernels: the instruction wrappers they use
// and the wgmma operand layout of Q and of bf16 KV tiles (K-major core
// matrices, no swizzle).
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM90_MLA_MLA_SM90_COMMON_CUH_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM90_MLA_MLA_SM90_COMMON_CUH_

#include "kernels/gpu/arch/sm80/mma.cuh"
#include "kernels/gpu/arch/sm90/pipeline.cuh"
#include "kernels/gpu/arch/sm90/wgmma.cuh"
#include "kernels/gpu/mla/mla_decode_params.h"

namespace kernelserve {
namespace gpu {
namespace mla {

using sm80::PackBf16x2Rn;
using sm80::SmemAddr;
using sm90::Bf16;
using sm90::F16;
using sm90::FenceOperand;
using sm90::FenceProxyAsync;
using sm90::MakeSmemDescInterleave;
using sm90::NamedBarrierArrive;
using sm90::NamedBarrierSync;
using sm90::WarpUniform;
using sm90::WgmmaCommit;
using sm90::WgmmaFence;
using sm90::WgmmaRS;
using sm90::WgmmaSS;
using sm90::WgmmaWait;

// One 64 x 576 tile of 16-bit values, core-tiled: 72 KB (Q, a bf16 KV tile).
constexpr int kTileBytes16 = kRows * kD * 2;
static_assert(kRows == kTok, "Q and KV tiles share the layout");

// Byte offset of (row, k) in a K-major, no-swizzle wgmma tile of 576 columns:
// 8x8 core matrices of 128 contiguous bytes, K-direction neighbours 128 B
// apart, row-group neighbours 72 * 128 B apart.
__device__ __forceinline__ int CoreTiled(int row, int k) {
  return ((row >> 3) * (kD / 8) + (k >> 3)) * 128 + (row & 7) * 16 + (k & 7) * 2;
}

}  // namespace mla
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM90_MLA_MLA_SM90_COMMON_CUH_
