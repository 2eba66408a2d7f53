// Explicit instantiation: sm_90a warp-specialized kernel (v4), head dim 128, causal.
#include "kernels/gpu/attention/sm90/flash_fwd_sm90_ws.h"

namespace kernelserve {
namespace gpu {

template <>
cudaError_t RunFlashFwdSm90WsHdim128<true>(const FlashFwdParams& params, cudaStream_t stream) {
  return sm90::LaunchFlashFwdSm90Ws<true, 2>(params, stream);
}

}  // namespace gpu
}  // namespace kernelserve
