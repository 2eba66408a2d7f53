// A minimal user kernel for bf16 attention on cuda
// (kernels/api/user_kernel_abi.h): one thread per query row, online softmax
// in fp32. Correct, not fast: the starting point of
// `kernelctl submit --op=attention --kernel=attention.cu`.
#include "kernels/api/user_kernel_abi.h"
#include "kernels/api/user_kernel_util.h"

namespace {

constexpr int kMaxDim = 256;

}  // namespace

// Exported under the ABI's name, so that this file also builds as a cubin or
// PTX (nvcc -cubin / -ptx) launched with the geometry the host entry uses below.
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

extern "C" {

KS_USER_ABI_DEFINE_VERSION();

int ks_user_attention_v1(const ks_attention_args_v1* a, void* stream) {
  if (a->struct_size != sizeof(ks_attention_args_v1) || a->head_dim > kMaxDim) return 1;
  const int64_t rows = a->batch * a->heads_q * a->seq_q;
  ks_user_attention_v1_kernel<<<(unsigned)((rows + 127) / 128), 128, 0, (cudaStream_t)stream>>>(*a);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}

}  // extern "C"
