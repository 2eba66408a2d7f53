// The host half of Fp8KernelParams that every vendor's FP8 attention entry
// fills the same way: the call's shape, layout, rounding and base-2 softmax
// scale, and the codes and descales of FP8 inputs. Plain C++ (the device
// compilers see only fp8_kernel_params.h).
#ifndef KERNELSERVE_KERNELS_GPU_FP8_ATTENTION_FP8_CALL_PARAMS_H_
#define KERNELSERVE_KERNELS_GPU_FP8_ATTENTION_FP8_CALL_PARAMS_H_

#include "kernels/api/ops.h"
#include "kernels/gpu/fp8_attention/fp8_kernel_params.h"

namespace kernelserve {
namespace gpu {
namespace fp8_attention {

// Shape, layout, rounding, scale_log2 of validated `a`; no pointers.
Fp8KernelParams Fp8CallParams(const Fp8AttentionParams& a);

// The FP8 inputs' codes and descales (per head when a descale has more than
// one element) into `p`.
void SetFp8Inputs(const Fp8AttentionInputs& in, Fp8KernelParams& p);

}  // namespace fp8_attention
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_FP8_ATTENTION_FP8_CALL_PARAMS_H_
