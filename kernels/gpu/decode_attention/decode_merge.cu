// The merge kernel: one thread per four output columns of one (request,
// token, query head) row. Splits that start past the request's seq_len wrote
// nothing and are not read; a split whose rows saw no key left m = -Inf.
#include "kernels/gpu/decode_attention/decode_merge.h"

#include <cmath>
#include <cstdint>

#include "kernels/gpu/common/bf16.cuh"
#include "kernels/gpu/common/gpu.h"
#include "kernels/gpu/decode_attention/decode_attention_params.h"

namespace kernelserve {
namespace gpu {
namespace decode {
namespace {

__global__ void __launch_bounds__(128) DecodeMergeKernel(const KParams p, int batch, int head_dim) {
  const int quads = head_dim / 4;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t total = static_cast<int64_t>(batch) * p.q_len * p.heads_q * quads;
  if (i >= total) return;
  const int d0 = static_cast<int>(i % quads) * 4;
  const int64_t orow = i / quads;  // (b * q_len + t) * Hq + h
  const int h = static_cast<int>(orow % p.heads_q);
  const int t = static_cast<int>((orow / p.heads_q) % p.q_len);
  const int b = static_cast<int>(orow / (static_cast<int64_t>(p.heads_q) * p.q_len));
  uint16_t* o = p.out + orow * head_dim + d0;
  const int qlen = p.q_lens != nullptr ? p.q_lens[b] : p.q_len;
  if (t >= qlen) {
    *reinterpret_cast<uint2*>(o) = make_uint2(PackBf16x2(0.f, 0.f, p.rounding), PackBf16x2(0.f, 0.f, p.rounding));
    return;
  }
  const int hkv = h / p.group, r = t * p.group + h % p.group;
  const int rg = r / p.cta_rows;
  const int used = (p.seq_lens[b] + p.chunk - 1) / p.chunk;  // splits holding keys
  const int64_t base =
      ((static_cast<int64_t>(b) * p.heads_kv + hkv) * p.row_groups + rg) * p.splits * p.cta_rows + r % p.cta_rows;
  float m_max = -INFINITY;
  for (int s = 0; s < used; ++s) m_max = fmaxf(m_max, p.part_ml[(base + static_cast<int64_t>(s) * p.cta_rows) * 2]);
  float l = 0.f;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int s = 0; s < used; ++s) {
    const int64_t pi = base + static_cast<int64_t>(s) * p.cta_rows;
    const float2 ml = *reinterpret_cast<const float2*>(p.part_ml + pi * 2);
    if (ml.x == -INFINITY) continue;
    const float w = Exp2(ml.x - m_max);
    l += w * ml.y;
    const float4 v = LoadOnce(reinterpret_cast<const float4*>(p.part_o + pi * head_dim + d0));
    acc.x += w * v.x;
    acc.y += w * v.y;
    acc.z += w * v.z;
    acc.w += w * v.w;
  }
  const float inv = p.out_scale / l;
  *reinterpret_cast<uint2*>(o) =
      make_uint2(PackBf16x2(acc.x * inv, acc.y * inv, p.rounding), PackBf16x2(acc.z * inv, acc.w * inv, p.rounding));
}

}  // namespace

cudaError_t LaunchDecodeMerge(const KParams& p, int batch, int head_dim, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(batch) * p.q_len * p.heads_q * (head_dim / 4);
  DecodeMergeKernel<<<static_cast<unsigned>((total + 127) / 128), 128, 0, stream>>>(p, batch, head_dim);
  return cudaGetLastError();
}

}  // namespace decode
}  // namespace gpu
}  // namespace kernelserve
