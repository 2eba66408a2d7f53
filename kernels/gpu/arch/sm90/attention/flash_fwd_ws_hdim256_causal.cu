// Explicit instantiation: warp-specialized wgmma kernel, head dim 256, causal.
#include "kernels/gpu/arch/sm90/attention/flash_fwd_ws_launch.h"

namespace kernelserve {
namespace gpu {
namespace attention {

// A 2-stage K/V ring of 64-key tiles: Q (64 KB) and two stages of K and V
// (32 KB each) take 192 KB of the 227 KB; a third stage would not fit.
template <>
cudaError_t RunFlashFwdWs<256, true>(const FlashFwdParams& params, const WsLaunchOptions& options,
                                     cudaStream_t stream) {
  return LaunchFlashFwdWs<256, true, 2>(params, options, stream);
}

}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve
