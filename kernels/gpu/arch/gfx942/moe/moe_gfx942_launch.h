// The launch of the gfx942 MXFP4 MoE GEMM (moe_gemm_mxfp4.hip), as pure host
// functions tested on the CPU: the CTA shape the kernel is compiled for, the
// routing tile it reads, the grid of each projection, and which epilogue a
// call's stages take. The code object is held to the same figures by
// //kernels/gpu/arch/gfx942/moe:moe_gfx942_hip_test.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_GFX942_MOE_MOE_GFX942_LAUNCH_H_
#define KERNELSERVE_KERNELS_GPU_ARCH_GFX942_MOE_MOE_GFX942_LAUNCH_H_

#include <cstdint>

namespace kernelserve {
namespace gpu {
namespace moe {
namespace gfx942 {

constexpr int kThreads = 256;   // four wave64s
constexpr int kTileRows = 16;   // (token, expert) pairs per routing tile: one MFMA M-tile
constexpr int kCtaCols = 64;    // output columns per CTA: 16 per wave
constexpr int kKMultiple = 32;  // K steps of one E8M0 scale block

// The GEMM's C names, one per epilogue (moe_params.h's Epilogue).
constexpr char kGemmBf16[] = "KsMoeGemmMxfp4Gfx942Bf16";
constexpr char kGemmSwiglu[] = "KsMoeGemmMxfp4Gfx942Swiglu";
constexpr char kGemmF32[] = "KsMoeGemmMxfp4Gfx942F32";

}  // namespace gfx942
}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve

#if !defined(__HIP_DEVICE_COMPILE__)
#include <string>

#include "kernels/api/ops.h"
#include "kernels/gpu/moe/moe_plan.h"

namespace kernelserve {
namespace gpu {
namespace moe {
namespace gfx942 {

// The routing tiles this kernel reads: 16-row tiles for every stage.
MoePlan Plan();

// Empty when the kernel serves validated `p`, else why not.
std::string Unsupported(const MoeParams& p);

// Grid of one GEMM: (column blocks of kCtaCols output columns, routing tiles
// at most). CTAs past the routing's tile count return at once.
struct GemmGrid {
  unsigned x = 1, y = 1;
};
GemmGrid Grid(int64_t out_cols, int64_t max_tiles);

}  // namespace gfx942
}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve
#endif  // !__HIP_DEVICE_COMPILE__

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_GFX942_MOE_MOE_GFX942_LAUNCH_H_
