// Explicit instantiation: head dim 128, noncausal.
#include "kernels/gpu/attention/flash_fwd_launch.h"

namespace kernelserve {
namespace gpu {

template cudaError_t RunFlashFwd<128, false>(const FlashFwdParams&, cudaStream_t);

}  // namespace gpu
}  // namespace kernelserve
