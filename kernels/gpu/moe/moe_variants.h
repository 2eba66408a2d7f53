// The variant table of the MXFP4 MoE stages (kernels/gpu/common/kernel_variant.h),
// in dispatch order: stream (decode), wgmma_rs (prefill: every stage from 12
// rows per expert, down from 64; moe::PlanMoe), mma_sync (the rest).
#ifndef KERNELSERVE_KERNELS_GPU_MOE_MOE_VARIANTS_H_
#define KERNELSERVE_KERNELS_GPU_MOE_MOE_VARIANTS_H_

#include "kernels/gpu/common/kernel_variant.h"

namespace kernelserve {
namespace gpu {

const VariantTable& MoeVariants();

}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_MOE_MOE_VARIANTS_H_
