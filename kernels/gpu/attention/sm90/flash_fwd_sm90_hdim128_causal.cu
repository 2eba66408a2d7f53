// Explicit instantiation: sm_90a wgmma kernel, head dim 128, causal.
#include "kernels/gpu/attention/sm90/flash_fwd_sm90.h"

namespace kernelserve {
namespace gpu {

template <>
cudaError_t RunFlashFwdSm90Hdim128<true>(const FlashFwdParams& params, cudaStream_t stream) {
  return sm90::LaunchFlashFwdSm90<true, 2, 128, 1>(params, stream);
}

}  // namespace gpu
}  // namespace kernelserve
