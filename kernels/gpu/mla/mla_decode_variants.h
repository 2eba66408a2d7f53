// The variant table of MLA decode (kernels/gpu/common/kernel_variant.h).
#ifndef KERNELSERVE_KERNELS_GPU_MLA_MLA_DECODE_VARIANTS_H_
#define KERNELSERVE_KERNELS_GPU_MLA_MLA_DECODE_VARIANTS_H_

#include "kernels/gpu/common/kernel_variant.h"

namespace kernelserve {
namespace gpu {

const VariantTable& MlaDecodeVariants();

}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_MLA_MLA_DECODE_VARIANTS_H_
