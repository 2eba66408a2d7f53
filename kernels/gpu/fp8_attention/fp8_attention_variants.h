// The variant table of FP8 attention (kernels/gpu/common/kernel_variant.h).
#ifndef KERNELSERVE_KERNELS_GPU_FP8_ATTENTION_FP8_ATTENTION_VARIANTS_H_
#define KERNELSERVE_KERNELS_GPU_FP8_ATTENTION_FP8_ATTENTION_VARIANTS_H_

#include "kernels/gpu/common/kernel_variant.h"

namespace kernelserve {
namespace gpu {

const VariantTable& Fp8AttentionVariants();

}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_FP8_ATTENTION_FP8_ATTENTION_VARIANTS_H_
