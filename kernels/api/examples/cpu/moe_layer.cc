// A minimal user kernel for the whole MXFP4 MoE layer on the cpu backend
// (kernels/api/user_kernel_abi.h): per (token, routed expert) pair, gate/up
// with the SwiGLU epilogue into the workspace (the intermediate rounded to
// bf16 RTNE, as the oracle does), then each token's output row as the
// weighted sum of its pairs' down projections, weights decoded from MXFP4,
// fp32 accumulation. Correct, not fast.
#include <cmath>
#include <vector>

#include "kernels/api/user_kernel_abi.h"
#include "kernels/api/user_kernel_util.h"

namespace {

// Row `row` of an expert's MXFP4 matrix of `cols` columns, dotted with v.
float Dot(const uint8_t* w, const uint8_t* scales, int64_t row, int64_t cols, const float* v) {
  const uint8_t* codes = w + row * (cols / 2);
  const uint8_t* s = scales + row * (cols / 32);
  float acc = 0;
  for (int64_t k = 0; k < cols; ++k) acc += v[k] * ks_mxfp4_at(codes, s, k);
  return acc;
}

}  // namespace

extern "C" {

KS_USER_ABI_DEFINE_VERSION();

int ks_user_moe_layer_v1(const ks_moe_layer_args_v1* a, void* /*stream*/) {
  if (a->struct_size != sizeof(ks_moe_layer_args_v1)) return 1;
  const int64_t K = a->hidden, I = a->inter, N = a->out_dim, R = a->top_k;
  if (a->workspace_bytes < a->tokens * R * I * 2) return 2;
  uint16_t* act = static_cast<uint16_t*>(a->workspace);  // bf16 [T*top_k, I]
  std::vector<float> x(K), ai(I), y(N);
  for (int64_t t = 0; t < a->tokens; ++t) {
    for (int64_t k = 0; k < K; ++k) x[k] = ks_bf16_to_float(a->x[t * K + k]);
    for (int64_t r = 0; r < R; ++r) {
      const int64_t e = a->topk_ids[t * R + r];
      const uint8_t* w13 = a->w13 + e * 2 * I * (K / 2);
      const uint8_t* s13 = a->w13_scales + e * 2 * I * (K / 32);
      for (int64_t i = 0; i < I; ++i) {
        const float g = Dot(w13, s13, i, K, x.data()), u = Dot(w13, s13, I + i, K, x.data());
        act[(t * R + r) * I + i] = ks_float_to_bf16(g / (1.0f + std::exp(-g)) * u, KS_ROUND_RTNE);
      }
    }
    for (int64_t n = 0; n < N; ++n) y[n] = 0;
    for (int64_t r = 0; r < R; ++r) {
      const int64_t e = a->topk_ids[t * R + r];
      for (int64_t i = 0; i < I; ++i) ai[i] = ks_bf16_to_float(act[(t * R + r) * I + i]);
      const uint8_t* w2 = a->w2 + e * N * (I / 2);
      const uint8_t* s2 = a->w2_scales + e * N * (I / 32);
      for (int64_t n = 0; n < N; ++n) y[n] += a->topk_weights[t * R + r] * Dot(w2, s2, n, I, ai.data());
    }
    for (int64_t n = 0; n < N; ++n) a->out[t * N + n] = ks_float_to_bf16(y[n], a->rounding);
  }
  return 0;
}

}  // extern "C"
