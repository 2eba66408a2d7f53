// A minimal user kernel for bf16 attention on hip
// (kernels/api/user_kernel_abi.h): one thread per query row, online softmax in
// fp32. Correct, not fast: the starting point of `kernelctl submit
// --op=attention --kernel=attention.cu`. The device kernel only: the hip
// backend builds it into a gfx942 code object (or takes one prebuilt) and
// launches it with grid_x = ceil(batch*heads_q*seq_q / 128), block_x = 128.
#include "kernels/api/user_kernel_util.h"  // first: <hip/hip_runtime.h>, then the ABI

namespace {

constexpr int kMaxDim = 256;

}  // namespace

// The worker launches it (hipModuleLaunchKernel) with the submission's launch;
// the geometry this kernel expects is in the comment above.
KS_USER_DEVICE_KERNEL(attention)(ks_attention_args_v1 a) {
  const int64_t row = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (row >= a.batch * a.heads_q * a.seq_q) return;
  const int64_t i = row % a.seq_q, h = row / a.seq_q % a.heads_q, b = row / a.seq_q / a.heads_q;
  const int64_t hk = h / (a.heads_q / a.heads_kv);
  const uint16_t* q = a.q + b * a.q_stride[0] + h * a.q_stride[1] + i * a.q_stride[2];
  float acc[kMaxDim];
  for (int d = 0; d < a.head_dim; ++d) acc[d] = 0.0f;
  float max = -INFINITY, sum = 0.0f;
  const int64_t last = a.causal ? i + a.seq_kv - a.seq_q : a.seq_kv - 1;
  for (int64_t j = 0; j <= last; ++j) {
    const uint16_t* k = a.k + b * a.k_stride[0] + hk * a.k_stride[1] + j * a.k_stride[2];
    const uint16_t* v = a.v + b * a.v_stride[0] + hk * a.v_stride[1] + j * a.v_stride[2];
    float s = 0.0f;
    for (int d = 0; d < a.head_dim; ++d) s += ks_bf16_to_float(q[d]) * ks_bf16_to_float(k[d]);
    s *= a.softmax_scale;
    const float m = fmaxf(max, s), corr = expf(max - m), p = expf(s - m);
    for (int d = 0; d < a.head_dim; ++d) acc[d] = acc[d] * corr + p * ks_bf16_to_float(v[d]);
    sum = sum * corr + p;
    max = m;
  }
  uint16_t* o = a.out + b * a.out_stride[0] + h * a.out_stride[1] + i * a.out_stride[2];
  for (int d = 0; d < a.head_dim; ++d) o[d] = ks_float_to_bf16(last < 0 ? 0.0f : acc[d] / sum, a.rounding);
}
