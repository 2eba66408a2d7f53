// Explicit instantiation: sm_90a wgmma kernel, head dim 128, noncausal.
#include "kernels/gpu/attention/sm90/flash_fwd_sm90.h"

namespace kernelserve {
namespace gpu {

template <>
cudaError_t RunFlashFwdSm90Hdim128<false>(const FlashFwdParams& params, cudaStream_t stream) {
  return sm90::LaunchFlashFwdSm90<false, 2, 128, 1>(params, stream);
}

}  // namespace gpu
}  // namespace kernelserve
