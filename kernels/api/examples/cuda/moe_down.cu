// A minimal user kernel for MXFP4 MoE down on cuda
// (kernels/api/user_kernel_abi.h): one thread per output element, decoding
// MXFP4 on the fly, fp32 accumulation, the weighted sum over a token's
// experts in a fixed order. Correct, not fast.
#include "kernels/api/user_kernel_abi.h"
#include "kernels/api/user_kernel_util.h"

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

// Exported under the ABI's name, so that this file also builds as a cubin or
// PTX (nvcc -cubin / -ptx) launched with the geometry the host entry uses below.
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

extern "C" {

KS_USER_ABI_DEFINE_VERSION();

int ks_user_moe_down_v1(const ks_moe_down_args_v1* a, void* stream) {
  if (a->struct_size != sizeof(ks_moe_down_args_v1)) return 1;
  const int64_t n = (a->weighted_sum ? a->tokens : a->tokens * a->top_k) * a->out_dim;
  ks_user_moe_down_v1_kernel<<<(unsigned)((n + 255) / 256), 256, 0, (cudaStream_t)stream>>>(*a);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}

}  // extern "C"
