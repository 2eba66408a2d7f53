// A minimal user kernel for MLA absorbed decode on hip
// (kernels/api/user_kernel_abi.h): one block per (request, draft position,
// head), one thread per latent column, the scores in shared memory. Correct,
// not fast. The device kernel only: the hip backend builds it into a gfx942
// code object (or takes one prebuilt) and launches it with grid_x =
// batch*q_len*heads, block_x = 128, dynamic_shared_bytes = seq_len*4 (at most
// 65536 on gfx942: seq_len <= 16384).
#include "kernels/api/user_kernel_util.h"  // first: <hip/hip_runtime.h>, then the ABI

namespace {

constexpr int kLat = 512, kPe = 64, kRow = kLat + kPe;

}  // namespace

// The worker launches it (hipModuleLaunchKernel) with the submission's launch;
// the geometry this kernel expects is in the comment above.
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
