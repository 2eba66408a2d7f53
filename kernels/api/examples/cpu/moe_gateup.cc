// A minimal user kernel for MXFP4 MoE gate/up on the cpu backend
// (kernels/api/user_kernel_abi.h): per (token, routed expert) pair the row
// of x times the expert's W13 rows, decoded from MXFP4, fp32 accumulation,
// optionally silu(gate) * up. Correct, not fast.
#include <cmath>
#include <vector>

#include "kernels/api/user_kernel_abi.h"
#include "kernels/api/user_kernel_util.h"

extern "C" {

KS_USER_ABI_DEFINE_VERSION();

int ks_user_moe_gateup_v1(const ks_moe_gateup_args_v1* a, void* /*stream*/) {
  if (a->struct_size != sizeof(ks_moe_gateup_args_v1)) return 1;
  const int64_t K = a->hidden, I = a->inter;
  std::vector<float> x(K), h(2 * I);
  for (int64_t t = 0; t < a->tokens; ++t) {
    for (int64_t k = 0; k < K; ++k) x[k] = ks_bf16_to_float(a->x[t * K + k]);
    for (int64_t r = 0; r < a->top_k; ++r) {
      const int64_t e = a->topk_ids[t * a->top_k + r];
      for (int64_t n = 0; n < 2 * I; ++n) {
        const uint8_t* codes = a->w13 + (e * 2 * I + n) * (K / 2);
        const uint8_t* scales = a->w13_scales + (e * 2 * I + n) * (K / 32);
        float s = 0;
        for (int64_t k = 0; k < K; ++k) s += x[k] * ks_mxfp4_at(codes, scales, k);
        h[n] = s;
      }
      uint16_t* o = a->out + (t * a->top_k + r) * (a->swiglu ? I : 2 * I);
      if (a->swiglu) {
        for (int64_t n = 0; n < I; ++n) {
          const float g = h[n];
          o[n] = ks_float_to_bf16(g / (1.0f + std::exp(-g)) * h[I + n], a->rounding);
        }
      } else {
        for (int64_t n = 0; n < 2 * I; ++n) o[n] = ks_float_to_bf16(h[n], a->rounding);
      }
    }
  }
  return 0;
}

}  // extern "C"
