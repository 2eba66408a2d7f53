// The merge kernel: one thread per four output columns of one (request,
// token, query head) row. Splits that start past the request's seq_len wrote
// nothing and are not read; a split whose rows saw no key left m = -Inf.
// Launched as a programmatic dependent of the split kernel (sm_90): its CTAs
// are scheduled while the split kernel's last CTAs run and wait in
// griddepcontrol.wait for its completion and memory, which takes the launch
// gap between the two kernels off the call.
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
  // Before any read or write: the split kernel's partials, and `out` only
  // after everything before it in the stream (a no-op without the launch
  // attribute).
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
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
  // Splits in batches of kBatch whose loads are all issued before any is
  // used (indices past `used` clamped to the last split and not added):
  // one at a time, 32 splits cost 64 dependent L2 round trips, most of a
  // small-batch call. Every split below `used` wrote its partial, so each
  // load is in bounds even where the row saw no key in the split (m = -Inf),
  // which adds nothing.
  constexpr int kBatch = 8;
  auto at = [&](int s) { return base + static_cast<int64_t>(min(s, used - 1)) * p.cta_rows; };
  float m_max = -INFINITY;
  for (int s0 = 0; s0 < used; s0 += kBatch) {
    float m[kBatch];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) m[k] = p.part_ml[at(s0 + k) * 2];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) m_max = fmaxf(m_max, m[k]);  // a clamped repeat changes nothing
  }
  float l = 0.f;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int s0 = 0; s0 < used; s0 += kBatch) {
    float2 ml[kBatch];
    float4 v[kBatch];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      ml[k] = *reinterpret_cast<const float2*>(p.part_ml + at(s0 + k) * 2);
      v[k] = LoadOnce(reinterpret_cast<const float4*>(p.part_o + at(s0 + k) * head_dim + d0));
    }
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      // Selects, not a branch: the next batch's loads are not held back.
      const bool add = s0 + k < used && ml[k].x != -INFINITY;
      const float w = Exp2(ml[k].x - m_max);
      l += add ? w * ml[k].y : 0.f;
      acc.x += add ? w * v[k].x : 0.f;
      acc.y += add ? w * v[k].y : 0.f;
      acc.z += add ? w * v[k].z : 0.f;
      acc.w += add ? w * v[k].w : 0.f;
    }
  }
  const float inv = p.out_scale / l;
  *reinterpret_cast<uint2*>(o) =
      make_uint2(PackBf16x2(acc.x * inv, acc.y * inv, p.rounding), PackBf16x2(acc.z * inv, acc.w * inv, p.rounding));
}

}  // namespace

cudaError_t LaunchDecodeMerge(const KParams& p, int batch, int head_dim, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(batch) * p.q_len * p.heads_q * (head_dim / 4);
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>((total + 127) / 128));
  cfg.blockDim = dim3(128);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  const cudaError_t e = cudaLaunchKernelEx(&cfg, DecodeMergeKernel, p, batch, head_dim);
  // As after <<<...>>>: the error is taken, not left pending.
  const cudaError_t pending = cudaGetLastError();
  return e != cudaSuccess ? e : pending;
}

}  // namespace decode
}  // namespace gpu
}  // namespace kernelserve
