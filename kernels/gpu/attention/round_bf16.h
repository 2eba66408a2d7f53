// Test hook for the attention epilogue's rounding (round_bf16.cuh).
#ifndef KERNELSERVE_KERNELS_GPU_ATTENTION_ROUND_BF16_H_
#define KERNELSERVE_KERNELS_GPU_ATTENTION_ROUND_BF16_H_

#include <cstdint>

#include "kernels/gpu/common/gpu.h"

namespace kernelserve {
namespace gpu {
namespace attention {

// out[i] = bf16 bits of in[i] (n floats, device memory) rounded in
// `rounding` (FlashRounding) by the functions the kernels' epilogue uses.
cudaError_t RoundToBf16OnDevice(const float* in, uint16_t* out, int64_t n, int rounding, cudaStream_t stream);

}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ATTENTION_ROUND_BF16_H_
