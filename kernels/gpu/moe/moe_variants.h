// The variant table of the MXFP4 MoE stages (kernels/gpu/common/kernel_variant.h),
// in dispatch order: stream (decode), wgmma_sw_128x256, wgmma_sw_192x192
// (gate/up alone, when moe::PlanMoe picks their tiling), wgmma_ws_128x256,
// wgmma_ws_192x192 (the same tilings warp-specialized: by name only until
// measured), mma_sync (every stage; the rest).
#ifndef KERNELSERVE_KERNELS_GPU_MOE_MOE_VARIANTS_H_
#define KERNELSERVE_KERNELS_GPU_MOE_MOE_VARIANTS_H_

#include "kernels/gpu/common/kernel_variant.h"

namespace kernelserve {
namespace gpu {

const VariantTable& MoeVariants();

}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_MOE_MOE_VARIANTS_H_
