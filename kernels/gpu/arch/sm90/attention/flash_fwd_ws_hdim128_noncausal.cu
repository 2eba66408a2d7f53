// Explicit instantiation: warp-specialized wgmma kernel, head dim 128, no mask.
#include "kernels/gpu/arch/sm90/attention/flash_fwd_ws_launch.h"

namespace kernelserve {
namespace gpu {
namespace attention {

// A 2-stage K/V ring.
template <>
cudaError_t RunFlashFwdWs<128, false>(const FlashFwdParams& params, const WsLaunchOptions& options,
                                      cudaStream_t stream) {
  return LaunchFlashFwdWs<128, false, 2>(params, options, stream);
}

}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve
