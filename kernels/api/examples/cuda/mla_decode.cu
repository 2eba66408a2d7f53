// A minimal user kernel for MLA absorbed decode on cuda
// (kernels/api/user_kernel_abi.h): one block per (request, draft position,
// head), one thread per latent column, the scores in shared memory.
// Correct, not fast.
#include "kernels/api/user_kernel_abi.h"
#include "kernels/api/user_kernel_util.h"

namespace {

constexpr int kLat = 512, kPe = 64, kRow = kLat + kPe;

}  // namespace

// Exported under the ABI's name, so that this file also builds as a cubin or
// PTX (nvcc -cubin / -ptx) launched with the geometry the host entry uses below.
KS_USER_DEVICE_KERNEL(mla_decode)(ks_mla_decode_args_v1 a) {
  extern __shared__ float score[];  // seq_len
  const int64_t qi = blockIdx.x;    // (b * q_len + t) * heads + h
  const int64_t b = qi / a.heads / a.q_len, t = qi / a.heads % a.q_len;
  const int64_t seq = a.seq_lens != nullptr ? a.seq_lens[b] : a.seq_len;
  const int64_t last = seq - a.q_len + t;
  const uint8_t* kv = a.kv + b * a.seq_len * kRow;
  for (int64_t j = threadIdx.x; j <= last; j += blockDim.x) {
    float s = 0.0f;
    for (int d = 0; d < kLat; ++d) s += ks_bf16_to_float(a.q_lat[qi * kLat + d]) * ks_fp8_to_float(kv[j * kRow + d], a.kv_format);
    for (int d = 0; d < kPe; ++d) {
      s += ks_bf16_to_float(a.q_pe[qi * kPe + d]) * ks_fp8_to_float(kv[j * kRow + kLat + d], a.kv_format);
    }
    score[j] = s * a.kv_scale * a.softmax_scale;
  }
  __syncthreads();
  float max = -INFINITY;
  for (int64_t j = 0; j <= last; ++j) max = fmaxf(max, score[j]);
  for (int d = threadIdx.x; d < kLat; d += blockDim.x) {
    float acc = 0.0f, sum = 0.0f;
    for (int64_t j = 0; j <= last; ++j) {
      const float p = expf(score[j] - max);
      sum += p;
      acc += p * ks_fp8_to_float(kv[j * kRow + d], a.kv_format) * a.kv_scale;
    }
    a.out[qi * kLat + d] = ks_float_to_bf16(last < 0 ? 0.0f : acc / sum, a.rounding);
  }
}

extern "C" {

KS_USER_ABI_DEFINE_VERSION();

int ks_user_mla_decode_v1(const ks_mla_decode_args_v1* a, void* stream) {
  if (a->struct_size != sizeof(ks_mla_decode_args_v1) || a->seq_len > 12 * 1024) return 1;
  const int64_t rows = a->batch * a->q_len * a->heads;
  ks_user_mla_decode_v1_kernel<<<(unsigned)rows, 128, a->seq_len * sizeof(float), (cudaStream_t)stream>>>(*a);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}

}  // extern "C"
