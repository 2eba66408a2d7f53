// A minimal user kernel for MXFP4 MoE down on hip
// (kernels/api/user_kernel_abi.h): one thread per output element, decoding
// MXFP4 on the fly, fp32 accumulation, the weighted sum over a token's experts
// in a fixed order. Correct, not fast. The device kernel only: the hip backend
// builds it into a gfx942 code object (or takes one prebuilt) and launches it
// with grid_x = ceil((weighted_sum ? tokens : tokens*top_k)*out_dim / 256),
// block_x = 256.
#include "kernels/api/user_kernel_util.h"  // first: <hip/hip_runtime.h>, then the ABI

namespace {

__device__ float Dot(const ks_moe_down_args_v1& a, int64_t pair, int64_t n) {
  const int64_t e = a.topk_ids[pair];
  const uint8_t* codes = a.w2 + (e * a.out_dim + n) * (a.inter / 2);
  const uint8_t* scales = a.w2_scales + (e * a.out_dim + n) * (a.inter / 32);
  float s = 0.0f;
  for (int64_t i = 0; i < a.inter; ++i) s += ks_bf16_to_float(a.a[pair * a.inter + i]) * ks_mxfp4_at(codes, scales, i);
  return s;
}

}  // namespace

// The worker launches it (hipModuleLaunchKernel) with the submission's launch;
// the geometry this kernel expects is in the comment above.
KS_USER_DEVICE_KERNEL(moe_down)(ks_moe_down_args_v1 a) {
  const int64_t rows = a.weighted_sum ? a.tokens : a.tokens * a.top_k;
  const int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (idx >= rows * a.out_dim) return;
  const int64_t row = idx / a.out_dim, n = idx % a.out_dim;
  float v = 0.0f;
  if (a.weighted_sum) {
    for (int64_t r = 0; r < a.top_k; ++r) v += a.topk_weights[row * a.top_k + r] * Dot(a, row * a.top_k + r, n);
  } else {
    v = Dot(a, row, n);
  }
  a.out[idx] = ks_float_to_bf16(v, a.rounding);
}
