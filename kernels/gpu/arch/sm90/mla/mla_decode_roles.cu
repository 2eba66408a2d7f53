// The roles kernel's one instantiation (e4m3fnuz KV, kRolesC0).
#include "kernels/gpu/arch/sm90/mla/mla_roles_kernel.cuh"
#include "kernels/gpu/arch/sm90/mla/mla_sm90_kernels.h"

namespace kernelserve {
namespace gpu {
namespace mla {

template __global__ void MlaDecodeRolesKernel<kRolesC0>(const KParams p);

DecodeKernel WgmmaRolesKernel() {
  return {MlaDecodeRolesKernel<kRolesC0>, kRolesThreads, kSmemBytesRoles, MlaPartials::kF32};
}

}  // namespace mla
}  // namespace gpu
}  // namespace kernelserve
