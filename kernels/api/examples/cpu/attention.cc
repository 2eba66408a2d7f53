// A minimal user kernel for bf16 attention on the cpu backend
// (kernels/api/user_kernel_abi.h): one query row at a time, scores in fp32,
// softmax with the row maximum subtracted, output rounded once to bf16.
// Correct, not fast: the starting point of `kernelctl submit --op=attention`.
#include <cmath>
#include <vector>

#include "kernels/api/user_kernel_abi.h"
#include "kernels/api/user_kernel_util.h"

extern "C" {

KS_USER_ABI_DEFINE_VERSION();

int ks_user_attention_v1(const ks_attention_args_v1* a, void* /*stream*/) {
  if (a->struct_size != sizeof(ks_attention_args_v1)) return 1;
  const int64_t group = a->heads_q / a->heads_kv;
  std::vector<float> score(a->seq_kv), acc(a->head_dim), q(a->head_dim);
  for (int64_t b = 0; b < a->batch; ++b) {
    for (int64_t h = 0; h < a->heads_q; ++h) {
      const int64_t hk = h / group;
      for (int64_t i = 0; i < a->seq_q; ++i) {
        const uint16_t* qr = a->q + b * a->q_stride[0] + h * a->q_stride[1] + i * a->q_stride[2];
        for (int64_t d = 0; d < a->head_dim; ++d) q[d] = ks_bf16_to_float(qr[d]);
        // Bottom-right aligned causal mask: query i sees keys j <= i + Skv - Sq.
        const int64_t last = a->causal ? i + a->seq_kv - a->seq_q : a->seq_kv - 1;
        float max = -INFINITY;
        for (int64_t j = 0; j <= last; ++j) {
          const uint16_t* kr = a->k + b * a->k_stride[0] + hk * a->k_stride[1] + j * a->k_stride[2];
          float s = 0;
          for (int64_t d = 0; d < a->head_dim; ++d) s += q[d] * ks_bf16_to_float(kr[d]);
          score[j] = s * a->softmax_scale;
          max = std::fmax(max, score[j]);
        }
        float sum = 0;
        for (int64_t d = 0; d < a->head_dim; ++d) acc[d] = 0;
        for (int64_t j = 0; j <= last; ++j) {
          const float p = std::exp(score[j] - max);
          sum += p;
          const uint16_t* vr = a->v + b * a->v_stride[0] + hk * a->v_stride[1] + j * a->v_stride[2];
          for (int64_t d = 0; d < a->head_dim; ++d) acc[d] += p * ks_bf16_to_float(vr[d]);
        }
        uint16_t* o = a->out + b * a->out_stride[0] + h * a->out_stride[1] + i * a->out_stride[2];
        // A row that sees no key (Sq > Skv, causal) is defined as zeros.
        for (int64_t d = 0; d < a->head_dim; ++d) {
          o[d] = ks_float_to_bf16(last < 0 ? 0.0f : acc[d] / sum, a->rounding);
        }
      }
    }
  }
  return 0;
}

}  // extern "C"
