// A minimal user kernel for FP8 attention on the cpu backend
// (kernels/api/user_kernel_abi.h): the FP8 codes decoded with their descales,
// attention in fp32 with exact (unquantized) P, which is the gate's
// reference numerics. A real kernel quantizes P as p_mode says (DESIGN §4).
#include <cmath>
#include <vector>

#include "kernels/api/user_kernel_abi.h"
#include "kernels/api/user_kernel_util.h"

extern "C" {

KS_USER_ABI_DEFINE_VERSION();

int ks_user_fp8_attention_v1(const ks_fp8_attention_args_v1* a, void* /*stream*/) {
  if (a->struct_size != sizeof(ks_fp8_attention_args_v1)) return 1;
  const int64_t group = a->heads_q / a->heads_kv;
  std::vector<float> score(a->seq_kv), acc(a->d_v), q(a->d_qk);
  for (int64_t b = 0; b < a->batch; ++b) {
    for (int64_t h = 0; h < a->heads_q; ++h) {
      const int64_t hk = h / group;
      for (int64_t i = 0; i < a->seq_q; ++i) {
        const uint8_t* qr = a->q + b * a->q_stride[0] + h * a->q_stride[1] + i * a->q_stride[2];
        for (int64_t d = 0; d < a->d_qk; ++d) q[d] = ks_fp8_to_float(qr[d], a->format) * a->q_descale;
        const int64_t last = a->causal ? i + a->seq_kv - a->seq_q : a->seq_kv - 1;
        float max = -INFINITY;
        for (int64_t j = 0; j <= last; ++j) {
          const uint8_t* kr = a->k + b * a->k_stride[0] + hk * a->k_stride[1] + j * a->k_stride[2];
          float s = 0;
          for (int64_t d = 0; d < a->d_qk; ++d) s += q[d] * ks_fp8_to_float(kr[d], a->format);
          score[j] = s * a->k_descale * a->softmax_scale;
          max = std::fmax(max, score[j]);
        }
        float sum = 0;
        for (int64_t d = 0; d < a->d_v; ++d) acc[d] = 0;
        for (int64_t j = 0; j <= last; ++j) {
          const float p = std::exp(score[j] - max);
          sum += p;
          const uint8_t* vr = a->v + b * a->v_stride[0] + hk * a->v_stride[1] + j * a->v_stride[2];
          for (int64_t d = 0; d < a->d_v; ++d) acc[d] += p * ks_fp8_to_float(vr[d], a->format);
        }
        uint16_t* o = a->out + b * a->out_stride[0] + h * a->out_stride[1] + i * a->out_stride[2];
        for (int64_t d = 0; d < a->d_v; ++d) {
          o[d] = ks_float_to_bf16(last < 0 ? 0.0f : acc[d] / sum * a->v_descale, a->rounding);
        }
      }
    }
  }
  return 0;
}

}  // extern "C"
