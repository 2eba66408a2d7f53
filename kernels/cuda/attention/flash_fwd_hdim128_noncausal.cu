// Explicit instantiation: head dim 128, noncausal.
#include "kernels/cuda/attention/flash_fwd_launch.h"

namespace kernelserve {
namespace cuda {

template cudaError_t RunFlashFwd<128, false>(const FlashFwdParams&, cudaStream_t);

}  // namespace cuda
}  // namespace kernelserve
