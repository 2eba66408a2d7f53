// The sm_90a grouped GEMMs of the MXFP4 MoE, as the launcher
// (kernels/gpu/moe/moe_launch.cc) calls them; their explicit instantiations
// are the .cu files beside this header. All walk the expert tiles of the
// routing (kernels/gpu/moe/moe_routing.h): grid (column tiles, max_tiles),
// CTAs past num_tiles return at once.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM90_MOE_MOE_GEMM_H_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM90_MOE_MOE_GEMM_H_

#include <cstdint>

#include "kernels/gpu/common/gpu.h"
#include "kernels/gpu/moe/moe_params.h"

namespace kernelserve {
namespace gpu {
namespace moe {

// Weight rows per CTA of the mma.sync kernel.
constexpr int kMmaSyncCols = 128;

// Warps per CTA of the weight-streaming decode kernel (16 weight rows each).
constexpr int kStreamWarps = 4;

// mma.sync m16n8k16 GEMM, any stage: kRows = 64 expert rows per tile (the
// one tiling instantiated); kEpi an Epilogue. col_tiles = ceil(p.nw / 128), or ceil(p.inter / 64)
// with SwiGLU.
template <int kRows, int kEpi>
cudaError_t LaunchMmaSyncGemm(const GemmParams& p, int64_t col_tiles, int64_t max_tiles, cudaStream_t stream);

// Weight-streaming GEMM for decode, any stage: expert tiles of kStreamRows
// rows; kEpi an Epilogue.
template <int kEpi>
cudaError_t LaunchStreamGemm(const GemmParams& p, int64_t max_tiles, cudaStream_t stream);

// wgmma GEMM with the dequantized weights as the register operand (M) and
// the tile's rows as N, any stage; kEpi an Epilogue; tiles of kRsRows rows.
template <int kEpi>
cudaError_t LaunchWgmmaRsGemm(const GemmParams& p, int64_t max_tiles, cudaStream_t stream);

}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM90_MOE_MOE_GEMM_H_
