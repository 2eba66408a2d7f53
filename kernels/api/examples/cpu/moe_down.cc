// A minimal user kernel for MXFP4 MoE down on the cpu backend
// (kernels/api/user_kernel_abi.h): per pair the activation row times the
// expert's W2 rows, decoded from MXFP4, fp32 accumulation, optionally
// weighted by topk_weights and summed per token. Correct, not fast.
#include <vector>

#include "kernels/api/user_kernel_abi.h"
#include "kernels/api/user_kernel_util.h"

extern "C" {

KS_USER_ABI_DEFINE_VERSION();

int ks_user_moe_down_v1(const ks_moe_down_args_v1* a, void* /*stream*/) {
  if (a->struct_size != sizeof(ks_moe_down_args_v1)) return 1;
  const int64_t I = a->inter, N = a->out_dim;
  std::vector<float> x(I), sum(N);
  for (int64_t t = 0; t < a->tokens; ++t) {
    for (int64_t n = 0; n < N; ++n) sum[n] = 0;
    for (int64_t r = 0; r < a->top_k; ++r) {
      const int64_t pair = t * a->top_k + r, e = a->topk_ids[pair];
      for (int64_t i = 0; i < I; ++i) x[i] = ks_bf16_to_float(a->a[pair * I + i]);
      for (int64_t n = 0; n < N; ++n) {
        const uint8_t* codes = a->w2 + (e * N + n) * (I / 2);
        const uint8_t* scales = a->w2_scales + (e * N + n) * (I / 32);
        float s = 0;
        for (int64_t i = 0; i < I; ++i) s += x[i] * ks_mxfp4_at(codes, scales, i);
        if (a->weighted_sum) {
          sum[n] += a->topk_weights[pair] * s;
        } else {
          a->out[pair * N + n] = ks_float_to_bf16(s, a->rounding);
        }
      }
    }
    if (a->weighted_sum) {
      for (int64_t n = 0; n < N; ++n) a->out[t * N + n] = ks_float_to_bf16(sum[n], a->rounding);
    }
  }
  return 0;
}

}  // extern "C"
