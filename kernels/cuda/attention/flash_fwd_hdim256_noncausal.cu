// Explicit instantiation: head dim 256, noncausal.
#include "kernels/cuda/attention/flash_fwd_launch.h"

namespace kernelserve {
namespace cuda {

template cudaError_t RunFlashFwd<256, false>(const FlashFwdParams&, cudaStream_t);

}  // namespace cuda
}  // namespace kernelserve
