// A minimal user kernel for the whole MXFP4 MoE layer on hip
// (kernels/api/user_kernel_abi.h): one thread per output element (token,
// column), which recomputes its tokens' SwiGLU intermediate (rounded to bf16
// RTNE, as the oracle does) column by column: one launch, no workspace, so
// that it is a device kernel alone. Correct and very slow (each
// output redoes the gate/up GEMV): a starting point only. The device kernel
// only: launch it with grid_x = ceil(tokens*out_dim / 256), block_x = 256.
#include "kernels/api/user_kernel_util.h"  // first: <hip/hip_runtime.h>, then the ABI

namespace {

__device__ float Dot(const uint8_t* w, const uint8_t* scales, int64_t row, int64_t cols, const uint16_t* v) {
  const uint8_t* codes = w + row * (cols / 2);
  const uint8_t* s = scales + row * (cols / 32);
  float acc = 0.0f;
  for (int64_t k = 0; k < cols; ++k) acc += ks_bf16_to_float(v[k]) * ks_mxfp4_at(codes, s, k);
  return acc;
}

}  // namespace

// The worker launches it (hipModuleLaunchKernel) with the submission's launch;
// the geometry this kernel expects is in the comment above.
KS_USER_DEVICE_KERNEL(moe_layer)(ks_moe_layer_args_v1 a) {
  const int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (idx >= a.tokens * a.out_dim) return;
  const int64_t t = idx / a.out_dim, n = idx % a.out_dim, K = a.hidden, I = a.inter;
  float y = 0.0f;
  for (int64_t r = 0; r < a.top_k; ++r) {
    const int64_t e = a.topk_ids[t * a.top_k + r];
    const uint8_t* w13 = a.w13 + e * 2 * I * (K / 2);
    const uint8_t* s13 = a.w13_scales + e * 2 * I * (K / 32);
    const uint8_t* w2 = a.w2 + (e * a.out_dim + n) * (I / 2);
    const uint8_t* s2 = a.w2_scales + (e * a.out_dim + n) * (I / 32);
    float down = 0.0f;
    for (int64_t i = 0; i < I; ++i) {
      const float g = Dot(w13, s13, i, K, a.x + t * K), u = Dot(w13, s13, I + i, K, a.x + t * K);
      const float act = ks_bf16_to_float(ks_float_to_bf16(g / (1.0f + expf(-g)) * u, KS_ROUND_RTNE));
      down += act * ks_mxfp4_at(w2, s2, i);
    }
    y += a.topk_weights[t * a.top_k + r] * down;
  }
  a.out[idx] = ks_float_to_bf16(y, a.rounding);
}
