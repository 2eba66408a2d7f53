// The QGMMA (wgmma e4m3) FP8 attention kernel (fp8_attention_qgmma.cu): its
// parameters and launcher, called by LaunchFp8Attention after quantization.
#ifndef KERNELSERVE_KERNELS_CUDA_FP8_ATTENTION_FP8_ATTENTION_QGMMA_H_
#define KERNELSERVE_KERNELS_CUDA_FP8_ATTENTION_FP8_ATTENTION_QGMMA_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace kernelserve {
namespace cuda_fp8 {

// e4m3fn codes in the input layout, descales per head or one per tensor.
struct QgmmaParams {
  const uint8_t* q;
  const uint8_t* k;
  const uint8_t* v;
  const float* q_ds;
  const float* k_ds;
  const float* v_ds;
  int q_ds_per_head, k_ds_per_head, v_ds_per_head;
  uint16_t* out;
  int heads_q, heads_kv, seq_q, seq_kv;
  int bshd;
  int rounding;
  float scale_log2;  // softmax scale * log2(e)
};

// Whether the kernel has an instantiation for this head shape.
bool QgmmaServes(int d_qk, int d_v);

cudaError_t LaunchFp8AttentionQgmma(const QgmmaParams& p, int batch, bool causal, int p_mode, cudaStream_t stream);

}  // namespace cuda_fp8
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_CUDA_FP8_ATTENTION_FP8_ATTENTION_QGMMA_H_
