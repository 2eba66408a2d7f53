// The merge kernel: eight lanes per four output columns of one (request,
// token, query head) row. Lane j combines splits j, j + 8, j + 16, ... with
// all of its loads issued at once, and the eight partial results meet in a
// fixed butterfly of shuffles: one or two L2 round trips per row instead of
// one per split, and the order (hence the result) does not depend on
// scheduling. Splits that start past the request's seq_len wrote nothing and
// are not read; a split whose rows saw no key left m = -Inf.
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

constexpr int kLanes = 8;  // per output quad
constexpr int kBatch = 8;  // splits per lane per round of loads

// (m, l, acc) of a partial softmax in base 2; m = -Inf: no key yet.
struct Partial {
  float m = -INFINITY, l = 0.f;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
};

// Adds (mo, lo, acco) into x.
__device__ __forceinline__ void Combine(Partial& x, float mo, float lo, const float4& acco) {
  const float m_new = fmaxf(x.m, mo);
  if (m_new == -INFINITY) return;  // neither side saw a key
  const float a = Exp2(x.m - m_new), w = Exp2(mo - m_new);
  x.l = x.l * a + lo * w;
  x.acc.x = x.acc.x * a + acco.x * w;
  x.acc.y = x.acc.y * a + acco.y * w;
  x.acc.z = x.acc.z * a + acco.z * w;
  x.acc.w = x.acc.w * a + acco.w * w;
  x.m = m_new;
}

__global__ void __launch_bounds__(128) DecodeMergeKernel(const KParams p, int batch, int head_dim) {
  // Before any read or write: the split kernel's partials, and `out` only
  // after everything before it in the stream (a no-op without the launch
  // attribute).
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  const int quads = head_dim / 4;
  const int64_t gt = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t i = gt / kLanes;
  const int j = static_cast<int>(gt % kLanes);
  const int64_t total = static_cast<int64_t>(batch) * p.q_len * p.heads_q * quads;
  // Every lane takes part in the shuffles; lanes past the end read nothing.
  const bool in_range = i < total;
  const int64_t ii = in_range ? i : 0;
  const int d0 = static_cast<int>(ii % quads) * 4;
  const int64_t orow = ii / quads;  // (b * q_len + t) * Hq + h
  const int h = static_cast<int>(orow % p.heads_q);
  const int t = static_cast<int>((orow / p.heads_q) % p.q_len);
  const int b = static_cast<int>(orow / (static_cast<int64_t>(p.heads_q) * p.q_len));
  const int qlen = p.q_lens != nullptr ? p.q_lens[b] : p.q_len;
  const bool live = in_range && t < qlen;
  const int hkv = h / p.group, r = t * p.group + h % p.group;
  const int rg = r / p.cta_rows;
  const int used = live ? (p.seq_lens[b] + p.chunk - 1) / p.chunk : 0;  // splits holding keys
  const int64_t base =
      ((static_cast<int64_t>(b) * p.heads_kv + hkv) * p.row_groups + rg) * p.splits * p.cta_rows + r % p.cta_rows;
  // Indices past `used` are clamped to the last split and not added: every
  // split below `used` wrote its partial, so each load is in bounds.
  auto at = [&](int s) { return base + static_cast<int64_t>(min(s, used - 1)) * p.cta_rows; };
  Partial x;
  for (int s0 = j; s0 < used; s0 += kLanes * kBatch) {
    float2 ml[kBatch];
    float4 v[kBatch];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      ml[k] = *reinterpret_cast<const float2*>(p.part_ml + at(s0 + k * kLanes) * 2);
      v[k] = LoadOnce(reinterpret_cast<const float4*>(p.part_o + at(s0 + k * kLanes) * head_dim + d0));
    }
    float mb = x.m;
#pragma unroll
    for (int k = 0; k < kBatch; ++k) mb = s0 + k * kLanes < used ? fmaxf(mb, ml[k].x) : mb;
    if (mb == -INFINITY) continue;
    // Selects, not a branch per split: the terms of one round share mb.
    const float a = Exp2(x.m - mb);
    x.l *= a;
    x.acc.x *= a;
    x.acc.y *= a;
    x.acc.z *= a;
    x.acc.w *= a;
    x.m = mb;
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const bool add = s0 + k * kLanes < used && ml[k].x != -INFINITY;
      const float w = add ? Exp2(ml[k].x - mb) : 0.f;
      x.l += w * ml[k].y;
      x.acc.x += w * v[k].x;
      x.acc.y += w * v[k].y;
      x.acc.z += w * v[k].z;
      x.acc.w += w * v[k].w;
    }
  }
#pragma unroll
  for (int off = 1; off < kLanes; off <<= 1) {
    const float mo = ShflXor(x.m, off), lo = ShflXor(x.l, off);
    const float4 ao = make_float4(ShflXor(x.acc.x, off), ShflXor(x.acc.y, off), ShflXor(x.acc.z, off),
                                  ShflXor(x.acc.w, off));
    Combine(x, mo, lo, ao);
  }
  if (!in_range || j != 0) return;
  uint16_t* o = p.out + orow * head_dim + d0;
  if (!live) {
    *reinterpret_cast<uint2*>(o) = make_uint2(PackBf16x2(0.f, 0.f, p.rounding), PackBf16x2(0.f, 0.f, p.rounding));
    return;
  }
  const float inv = p.out_scale / x.l;
  *reinterpret_cast<uint2*>(o) = make_uint2(PackBf16x2(x.acc.x * inv, x.acc.y * inv, p.rounding),
                                            PackBf16x2(x.acc.z * inv, x.acc.w * inv, p.rounding));
}

}  // namespace

cudaError_t LaunchDecodeMerge(const KParams& p, int batch, int head_dim, cudaStream_t stream) {
  const int64_t threads = static_cast<int64_t>(batch) * p.q_len * p.heads_q * (head_dim / 4) * kLanes;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>((threads + 127) / 128));
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
