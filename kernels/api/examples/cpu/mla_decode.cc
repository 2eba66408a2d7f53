// A minimal user kernel for MLA absorbed decode on the cpu backend
// (kernels/api/user_kernel_abi.h): per (request, draft position, head) the
// scores over the request's window, softmax in fp32, the latent rows
// weighted. Correct, not fast.
#include <cmath>
#include <vector>

#include "kernels/api/user_kernel_abi.h"
#include "kernels/api/user_kernel_util.h"

extern "C" {

KS_USER_ABI_DEFINE_VERSION();

int ks_user_mla_decode_v1(const ks_mla_decode_args_v1* a, void* /*stream*/) {
  if (a->struct_size != sizeof(ks_mla_decode_args_v1)) return 1;
  constexpr int64_t kLat = 512, kPe = 64, kRow = kLat + kPe;
  std::vector<float> kv(a->seq_len * kRow), score(a->seq_len), acc(kLat), q(kRow);
  for (int64_t b = 0; b < a->batch; ++b) {
    const int64_t seq = a->seq_lens != nullptr ? a->seq_lens[b] : a->seq_len;
    const uint8_t* rows = a->kv + b * a->seq_len * kRow;
    for (int64_t x = 0; x < seq * kRow; ++x) kv[x] = ks_fp8_to_float(rows[x], a->kv_format) * a->kv_scale;
    for (int64_t t = 0; t < a->q_len; ++t) {
      const int64_t last = seq - a->q_len + t;  // this draft position sees rows 0..last
      for (int64_t h = 0; h < a->heads; ++h) {
        const int64_t qi = (b * a->q_len + t) * a->heads + h;
        for (int64_t d = 0; d < kLat; ++d) q[d] = ks_bf16_to_float(a->q_lat[qi * kLat + d]);
        for (int64_t d = 0; d < kPe; ++d) q[kLat + d] = ks_bf16_to_float(a->q_pe[qi * kPe + d]);
        float max = -INFINITY;
        for (int64_t j = 0; j <= last; ++j) {
          float s = 0;
          for (int64_t d = 0; d < kRow; ++d) s += q[d] * kv[j * kRow + d];
          score[j] = s * a->softmax_scale;
          max = std::fmax(max, score[j]);
        }
        float sum = 0;
        for (int64_t d = 0; d < kLat; ++d) acc[d] = 0;
        for (int64_t j = 0; j <= last; ++j) {
          const float p = std::exp(score[j] - max);
          sum += p;
          for (int64_t d = 0; d < kLat; ++d) acc[d] += p * kv[j * kRow + d];
        }
        for (int64_t d = 0; d < kLat; ++d) {
          a->out[qi * kLat + d] = ks_float_to_bf16(last < 0 ? 0.0f : acc[d] / sum, a->rounding);
        }
      }
    }
  }
  return 0;
}

}  // extern "C"
