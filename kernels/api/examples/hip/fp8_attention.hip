// A minimal user kernel for FP8 attention on hip
// (kernels/api/user_kernel_abi.h): one thread per query row, the FP8 codes
// decoded with their descales, online softmax with exact P in fp32 (the gate's
// reference numerics). Correct, not fast. The device kernel only: the hip
// backend builds it into a gfx942 code object (or takes one prebuilt) and
// launches it with grid_x = ceil(batch*heads_q*seq_q / 128), block_x = 128.
#include "kernels/api/user_kernel_util.h"  // first: <hip/hip_runtime.h>, then the ABI

namespace {

constexpr int kMaxDim = 256;

}  // namespace

// The worker launches it (hipModuleLaunchKernel) with the submission's launch;
// the geometry this kernel expects is in the comment above.
KS_USER_DEVICE_KERNEL(fp8_attention)(ks_fp8_attention_args_v1 a) {
  const int64_t row = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (row >= a.batch * a.heads_q * a.seq_q) return;
  const int64_t i = row % a.seq_q, h = row / a.seq_q % a.heads_q, b = row / a.seq_q / a.heads_q;
  const int64_t hk = h / (a.heads_q / a.heads_kv);
  const uint8_t* q = a.q + b * a.q_stride[0] + h * a.q_stride[1] + i * a.q_stride[2];
  float acc[kMaxDim];
  for (int d = 0; d < a.d_v; ++d) acc[d] = 0.0f;
  float max = -INFINITY, sum = 0.0f;
  const int64_t last = a.causal ? i + a.seq_kv - a.seq_q : a.seq_kv - 1;
  for (int64_t j = 0; j <= last; ++j) {
    const uint8_t* k = a.k + b * a.k_stride[0] + hk * a.k_stride[1] + j * a.k_stride[2];
    const uint8_t* v = a.v + b * a.v_stride[0] + hk * a.v_stride[1] + j * a.v_stride[2];
    float s = 0.0f;
    for (int d = 0; d < a.d_qk; ++d) s += ks_fp8_to_float(q[d], a.format) * ks_fp8_to_float(k[d], a.format);
    s *= a.q_descale * a.k_descale * a.softmax_scale;
    const float m = fmaxf(max, s), corr = expf(max - m), p = expf(s - m);
    for (int d = 0; d < a.d_v; ++d) acc[d] = acc[d] * corr + p * ks_fp8_to_float(v[d], a.format);
    sum = sum * corr + p;
    max = m;
  }
  uint16_t* o = a.out + b * a.out_stride[0] + h * a.out_stride[1] + i * a.out_stride[2];
  for (int d = 0; d < a.d_v; ++d) {
    o[d] = ks_float_to_bf16(last < 0 ? 0.0f : acc[d] / sum * a.v_descale, a.rounding);
  }
}
