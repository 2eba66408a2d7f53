// Explicit instantiation: warp-specialized wgmma kernel, head dim 64, causal.
#include "kernels/gpu/arch/sm90/attention/flash_fwd_ws_launch.h"

namespace kernelserve {
namespace gpu {
namespace attention {

// A 3-stage K/V ring: a stage is half of d128's (32 KB), and a tile's
// products take half as long, so the producer runs one more tile ahead.
template <>
cudaError_t RunFlashFwdWs<64, true>(const FlashFwdParams& params, const WsLaunchOptions& options,
                                    cudaStream_t stream) {
  return LaunchFlashFwdWs<64, true, 3>(params, options, stream);
}

}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve
