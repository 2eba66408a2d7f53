// What the FP8 attention kernels (kernels/gpu/arch/sm90/fp8_attention/) take
// from the host entry after quantization: e4m3 codes in the input layout and
// their descales. Plain data without a vendor header.
#ifndef KERNELSERVE_KERNELS_GPU_FP8_ATTENTION_FP8_KERNEL_PARAMS_H_
#define KERNELSERVE_KERNELS_GPU_FP8_ATTENTION_FP8_KERNEL_PARAMS_H_

#include <cstdint>

namespace kernelserve {
namespace gpu {
namespace fp8_attention {

struct Fp8KernelParams {
  const uint8_t* q;
  const uint8_t* k;
  const uint8_t* v;
  const float* q_ds;  // descales per head or one per tensor
  const float* k_ds;
  const float* v_ds;
  int q_ds_per_head, k_ds_per_head, v_ds_per_head;
  uint16_t* out;
  int heads_q, heads_kv, seq_q, seq_kv;
  int bshd;
  int rounding;
  float scale_log2;  // softmax scale * log2(e)
  // Naive P's frame below the running max, in binades: 1 for e4m3fnuz, whose
  // codes of p are e4m3fn's of 2p (the kernels encode e4m3fn), else 0.
  float naive_ref_shift;
};

}  // namespace fp8_attention
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_FP8_ATTENTION_FP8_KERNEL_PARAMS_H_
