// The variant table of MLA decode (kernels/gpu/common/kernel_variant.h): the
// only list of its kernels, read by the dispatcher (gpu_backend.cc), the
// tests (mla_decode_cuda_test.cc), the benchmark (bench/mla_cuda_bench.cc)
// and benchmark jobs.
#ifndef KERNELSERVE_KERNELS_GPU_MLA_MLA_DECODE_VARIANTS_H_
#define KERNELSERVE_KERNELS_GPU_MLA_MLA_DECODE_VARIANTS_H_

#include "kernels/api/op_call.h"
#include "kernels/api/ops.h"
#include "kernels/gpu/common/kernel_variant.h"

namespace kernelserve {
namespace gpu {

const VariantTable& MlaDecodeVariants();

// The call an entry's predicates and run read.
OpCall MlaDecodeCall(const MlaDecodeParams& p, const MlaDecodeInputs& in);

}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_MLA_MLA_DECODE_VARIANTS_H_
