// Explicit instantiation: mma.sync kernel, head dim 64, causal.
#include "kernels/gpu/arch/sm90/attention/flash_fwd_mma_sync_launch.h"

namespace kernelserve {
namespace gpu {
namespace attention {

template cudaError_t RunFlashFwdMmaSync<64, true>(const FlashFwdParams&, cudaStream_t);

}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve
