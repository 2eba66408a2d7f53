// Device-side parameters of the bf16 MHA forward kernels: what the host entry
// (attention_params.cc) makes of validated AttentionParams and the views.
// Plain data without a vendor header, so that the host entry, its CPU tests
// and the kernels (kernels/gpu/arch/sm90/attention/) all include it.
#ifndef KERNELSERVE_KERNELS_GPU_ATTENTION_FLASH_PARAMS_H_
#define KERNELSERVE_KERNELS_GPU_ATTENTION_FLASH_PARAMS_H_

#include <cstdint>

namespace kernelserve {
namespace gpu {
namespace attention {

// Rounding of the bf16 output; values as kernelserve::Rounding.
enum FlashRounding : int { kFlashRtne = 1, kFlashRtna = 2, kFlashRtz = 3 };

struct FlashFwdParams {
  const void* q = nullptr;  // bf16
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  // Strides in elements. BHSD and BSHD differ only here.
  int64_t q_batch_stride = 0, q_head_stride = 0, q_row_stride = 0;
  int64_t k_batch_stride = 0, k_head_stride = 0, k_row_stride = 0;
  int64_t v_batch_stride = 0, v_head_stride = 0, v_row_stride = 0;
  int64_t o_batch_stride = 0, o_head_stride = 0, o_row_stride = 0;
  int batch = 0, heads_q = 0, heads_kv = 0, seq_q = 0, seq_kv = 0;
  int group = 1;             // heads_q / heads_kv (GQA)
  int causal_offset = 0;     // seq_kv - seq_q: bottom-right aligned mask
  float scale_log2 = 0;      // softmax scale * log2(e), > 0
  int rounding = kFlashRtne;
};

}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ATTENTION_FLASH_PARAMS_H_
