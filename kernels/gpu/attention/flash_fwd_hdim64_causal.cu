// Explicit instantiation: head dim 64, causal.
#include "kernels/gpu/attention/flash_fwd_launch.h"

namespace kernelserve {
namespace gpu {

template cudaError_t RunFlashFwd<64, true>(const FlashFwdParams&, cudaStream_t);

}  // namespace gpu
}  // namespace kernelserve
