// The sm_90a MLA decode kernels, for the variant table
// (kernels/gpu/mla/mla_decode_variants.cc). Each serves every shape of the
// op (paged with any page size or contiguous, ragged q_lens, q_len 1..8,
// H up to 128, any split count) for the KV format named.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM90_MLA_MLA_SM90_KERNELS_H_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM90_MLA_MLA_SM90_KERNELS_H_

#include "kernels/gpu/mla/mla_decode_params.h"

namespace kernelserve {
namespace gpu {
namespace mla {

// e4m3fn KV converted in registers into the wgmma A operand, f16 tensor
// cores, a producer warpgroup (mla_decode_rega.cu); `cta_rows` 16 (calls
// with q_len * H <= 16, RegACtaRows), 32 (q_len * H <= 32) or 64 (every
// call).
DecodeKernel WgmmaRegAKernel(int cta_rows);

// e4m3fnuz KV unpacked to bf16 in shared memory, bf16 wgmma, warpgroups in
// roles (mla_roles_kernel.cuh).
DecodeKernel WgmmaRolesKernel();

}  // namespace mla
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM90_MLA_MLA_SM90_KERNELS_H_
