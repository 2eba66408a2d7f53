// The QGMMA (wgmma e4m3) FP8 attention kernel (fp8_attention_qgmma.cu): its
// parameters and launcher, called by LaunchFp8Attention after quantization.
#ifndef KERNELSERVE_KERNELS_CUDA_FP8_ATTENTION_FP8_ATTENTION_QGMMA_H_
#define KERNELSERVE_KERNELS_CUDA_FP8_ATTENTION_FP8_ATTENTION_QGMMA_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/gpu/fp8_attention/fp8_kernel_params.h"

namespace kernelserve {
namespace cuda_fp8 {

// Whether the kernel has an instantiation for this head shape.
bool QgmmaServes(int d_qk, int d_v);

cudaError_t LaunchFp8AttentionQgmma(const Fp8KernelParams& p, int batch, bool causal, int p_mode, cudaStream_t stream);

}  // namespace cuda_fp8
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_CUDA_FP8_ATTENTION_FP8_ATTENTION_QGMMA_H_
