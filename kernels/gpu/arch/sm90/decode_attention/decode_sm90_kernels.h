// The sm_90a decode attention kernels over PER_HEAD_KV pools, one object per
// KV format (decode_<format>.cu, all from decode_kernel.cuh). Each serves
// every shape of the op for its format: head_dim 64, 128 and 256, any GQA
// ratio, any page size, ragged seq_lens and q_lens, q_len 1..8, any split.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM90_DECODE_ATTENTION_DECODE_SM90_KERNELS_H_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM90_DECODE_ATTENTION_DECODE_SM90_KERNELS_H_

#include "kernels/gpu/decode_attention/decode_attention_params.h"

namespace kernelserve {
namespace gpu {
namespace decode {

// The kernel of (format, head_dim, mt): mt 1 for every head_dim, 2 for
// head_dim 64 and 128; fn == nullptr otherwise.
DecodeKernel DecodeKernelBf16(int head_dim, int mt);
DecodeKernel DecodeKernelE4m3fn(int head_dim, int mt);
DecodeKernel DecodeKernelE4m3fnuz(int head_dim, int mt);
DecodeKernel DecodeKernelE5m2(int head_dim, int mt);

}  // namespace decode
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM90_DECODE_ATTENTION_DECODE_SM90_KERNELS_H_
