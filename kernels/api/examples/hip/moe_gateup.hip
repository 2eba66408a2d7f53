// A minimal user kernel for MXFP4 MoE gate/up on hip
// (kernels/api/user_kernel_abi.h): one thread per output element of a (token,
// expert) pair, decoding MXFP4 on the fly, fp32 accumulation. Correct, not
// fast. The device kernel only: the hip backend builds it into a gfx942 code
// object (or takes one prebuilt) and launches it with grid_x =
// ceil(tokens*top_k*(swiglu ? inter : 2*inter) / 256), block_x = 256.
#include "kernels/api/user_kernel_util.h"  // first: <hip/hip_runtime.h>, then the ABI

namespace {

__device__ float Dot(const ks_moe_gateup_args_v1& a, int64_t t, int64_t e, int64_t n) {
  const uint8_t* codes = a.w13 + (e * 2 * a.inter + n) * (a.hidden / 2);
  const uint8_t* scales = a.w13_scales + (e * 2 * a.inter + n) * (a.hidden / 32);
  float s = 0.0f;
  for (int64_t k = 0; k < a.hidden; ++k) s += ks_bf16_to_float(a.x[t * a.hidden + k]) * ks_mxfp4_at(codes, scales, k);
  return s;
}

}  // namespace

// The worker launches it (hipModuleLaunchKernel) with the submission's launch;
// the geometry this kernel expects is in the comment above.
KS_USER_DEVICE_KERNEL(moe_gateup)(ks_moe_gateup_args_v1 a) {
  const int64_t width = a.swiglu ? a.inter : 2 * a.inter;
  const int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (idx >= a.tokens * a.top_k * width) return;
  const int64_t pair = idx / width, n = idx % width, t = pair / a.top_k;
  const int64_t e = a.topk_ids[pair];
  float v;
  if (a.swiglu) {
    const float g = Dot(a, t, e, n), u = Dot(a, t, e, a.inter + n);
    v = g / (1.0f + expf(-g)) * u;
  } else {
    v = Dot(a, t, e, n);
  }
  a.out[idx] = ks_float_to_bf16(v, a.rounding);
}
