// Explicit instantiation: warp-specialized wgmma kernel, head dim 256, no mask.
#include "kernels/gpu/arch/sm90/attention/flash_fwd_ws_launch.h"

namespace kernelserve {
namespace gpu {
namespace attention {

// A 2-stage K/V ring of 64-key tiles: Q (64 KB) and two stages of K and V
// (32 KB each) take 192 KB of the 227 KB; a third stage would not fit.
template <>
cudaError_t RunFlashFwdWs<256, false>(const FlashFwdParams& params, const WsLaunchOptions& options,
                                      cudaStream_t stream) {
  return LaunchFlashFwdWs<256, false, 2>(params, options, stream);
}

}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve
