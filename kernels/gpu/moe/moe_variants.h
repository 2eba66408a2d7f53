// The variant table of the MXFP4 MoE stages (kernels/gpu/common/kernel_variant.h),
// in dispatch order: wgmma_sw_128x256, wgmma_sw_192x192 (gate/up alone, when
// moe::PlanMoe picks their tiling), mma_sync (every stage; the rest).
#ifndef KERNELSERVE_KERNELS_GPU_MOE_MOE_VARIANTS_H_
#define KERNELSERVE_KERNELS_GPU_MOE_MOE_VARIANTS_H_

#include "kernels/gpu/common/kernel_variant.h"

namespace kernelserve {
namespace gpu {

const VariantTable& MoeVariants();

}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_MOE_MOE_VARIANTS_H_
