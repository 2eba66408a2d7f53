// Explicit instantiation: head dim 64, noncausal.
#include "kernels/cuda/attention/flash_fwd_launch.h"

namespace kernelserve {
namespace cuda {

template cudaError_t RunFlashFwd<64, false>(const FlashFwdParams&, cudaStream_t);

}  // namespace cuda
}  // namespace kernelserve
