// The bf16 MHA forward kernels of this folder as the host entry
// (kernels/gpu/attention/attention.cc) launches them: one explicit
// instantiation per (head dim, mask), each in its own .cu file.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM90_ATTENTION_FLASH_FWD_H_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM90_ATTENTION_FLASH_FWD_H_

#include "kernels/gpu/arch/sm90/attention/ws_plan.h"
#include "kernels/gpu/attention/flash_params.h"
#include "kernels/gpu/common/gpu.h"

namespace kernelserve {
namespace gpu {
namespace attention {

// Warp-specialized wgmma (flash_fwd_ws_*): a TMA producer warpgroup and two
// consumer warpgroups in ping-pong; head dims 64, 128 and 256, seq_kv >= 1.
// `options`: the dense-tail split by the cost model unless overridden
// (ws_plan.h).
template <int kHeadDim, bool kCausal>
cudaError_t RunFlashFwdWs(const FlashFwdParams& params, const WsLaunchOptions& options, cudaStream_t stream);

}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM90_ATTENTION_FLASH_FWD_H_
