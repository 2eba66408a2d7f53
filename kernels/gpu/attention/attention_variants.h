// The variant table of bf16 attention (kernels/gpu/common/kernel_variant.h).
#ifndef KERNELSERVE_KERNELS_GPU_ATTENTION_ATTENTION_VARIANTS_H_
#define KERNELSERVE_KERNELS_GPU_ATTENTION_ATTENTION_VARIANTS_H_

#include "kernels/gpu/common/kernel_variant.h"

namespace kernelserve {
namespace gpu {

const VariantTable& AttentionVariants();

}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ATTENTION_ATTENTION_VARIANTS_H_
