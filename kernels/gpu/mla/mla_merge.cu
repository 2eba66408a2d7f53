// The two merge kernels, one per partials layout (MlaPartials), written
// against the vendor layer only.
#include "kernels/gpu/mla/mla_merge.h"

#include <cmath>
#include <cstdint>

#include "kernels/gpu/common/bf16.cuh"
#include "kernels/gpu/common/gpu.h"
#include "kernels/gpu/mla/mla_decode_params.h"

namespace kernelserve {
namespace gpu {
namespace mla {
namespace {

// The first partial of (request b, row r) (split s at + s * kRows), or -1 for
// a row past the request's q_len (the merge writes it as zeros).
__device__ __forceinline__ int64_t MergeRowBase(const KParams& p, int b, int r) {
  const int ql = p.q_lens ? p.q_lens[b] : p.q_len;
  if (r / p.heads >= ql) return -1;
  return (static_cast<int64_t>(b) * p.row_groups + r / kRows) * p.splits * kRows + r % kRows;
}

// MlaPartials::kF32: the unnormalized fp32 O of one (request, row), combined
// in split order, empty splits skipped. 128 threads x 4 columns.
__global__ void __launch_bounds__(128) MlaMergeKernel(const KParams p) {
  const int r = blockIdx.x, b = blockIdx.y;
  const int col = threadIdx.x * 4;
  uint16_t* o = p.out + (static_cast<int64_t>(b) * p.rows + r) * kDL + col;
  const int64_t base = MergeRowBase(p, b, r);
  if (base < 0) {
    *reinterpret_cast<uint2*>(o) = make_uint2(0u, 0u);
    return;
  }
  float m_max = -INFINITY;
  for (int s = 0; s < p.splits; ++s) m_max = fmaxf(m_max, p.part_ml[(base + s * kRows) * 2]);
  float l = 0.f;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int s = 0; s < p.splits; ++s) {
    const int64_t pi = base + s * kRows;
    const float m = p.part_ml[pi * 2];
    if (m == -INFINITY) continue;
    const float w = Exp2(m - m_max);
    l += w * p.part_ml[pi * 2 + 1];
    const float4 v = *reinterpret_cast<const float4*>(p.part_o + pi * kDL + col);
    acc.x += w * v.x;
    acc.y += w * v.y;
    acc.z += w * v.z;
    acc.w += w * v.w;
  }
  const float inv = p.out_scale / l;
  *reinterpret_cast<uint2*>(o) =
      make_uint2(PackBf16x2(acc.x * inv, acc.y * inv, p.rounding), PackBf16x2(acc.z * inv, acc.w * inv, p.rounding));
}

// MlaPartials::kF16: the f16 partials (O / l) of one (request, row), combined
// in split order, 64 threads per row, 8 columns each. Every split's (m, l)
// and partial are loaded before any is used (kMergeBatch splits at once), so
// this waits for one memory round trip, not one per split. Every split wrote
// its partial (zeros and m = -Inf when empty). The partials are read once.
constexpr int kMergeBatch = 16;
__global__ void __launch_bounds__(128) MlaMergeHalfKernel(const KParams p) {
  const int r = blockIdx.x * 2 + (threadIdx.x >> 6), b = blockIdx.y;
  if (r >= p.rows) return;
  const int col = (threadIdx.x & 63) * 8;
  uint16_t* o = p.out + (static_cast<int64_t>(b) * p.rows + r) * kDL + col;
  const int64_t base = MergeRowBase(p, b, r);
  if (base < 0) {
    *reinterpret_cast<uint4*>(o) = make_uint4(0u, 0u, 0u, 0u);
    return;
  }
  const uint16_t* part = reinterpret_cast<const uint16_t*>(p.part_o);  // f16 bits
  const float2* ml_all = reinterpret_cast<const float2*>(p.part_ml);
  float m_max = -INFINITY, l = 0.f;
  float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  for (int s0 = 0; s0 < p.splits; s0 += kMergeBatch) {
    float2 ml[kMergeBatch];
    uint4 h[kMergeBatch];
#pragma unroll
    for (int i = 0; i < kMergeBatch; ++i) {
      ml[i] = make_float2(-INFINITY, 0.f);
      h[i] = make_uint4(0u, 0u, 0u, 0u);
      if (s0 + i < p.splits) {
        const int64_t pi = base + static_cast<int64_t>(s0 + i) * kRows;
        ml[i] = LoadOnce(ml_all + pi);
        h[i] = LoadOnce(reinterpret_cast<const uint4*>(part + pi * kDL + col));
      }
    }
    float bm = m_max;
#pragma unroll
    for (int i = 0; i < kMergeBatch; ++i) bm = fmaxf(bm, ml[i].x);
    if (m_max != -INFINITY && bm != m_max) {  // only past kMergeBatch splits
      const float sc = Exp2(m_max - bm);
      l *= sc;
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[j] *= sc;
    }
    m_max = bm;
#pragma unroll
    for (int i = 0; i < kMergeBatch; ++i) {
      const float wl = ml[i].x == -INFINITY ? 0.f : Exp2(ml[i].x - m_max) * ml[i].y;
      const uint32_t w[4] = {h[i].x, h[i].y, h[i].z, h[i].w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 v = Half2ToFloat2(w[j]);
        acc[2 * j] += wl * v.x;
        acc[2 * j + 1] += wl * v.y;
      }
      l += wl;
    }
  }
  const float inv = p.out_scale / l;
  uint4 v;
  v.x = PackBf16x2(acc[0] * inv, acc[1] * inv, p.rounding);
  v.y = PackBf16x2(acc[2] * inv, acc[3] * inv, p.rounding);
  v.z = PackBf16x2(acc[4] * inv, acc[5] * inv, p.rounding);
  v.w = PackBf16x2(acc[6] * inv, acc[7] * inv, p.rounding);
  *reinterpret_cast<uint4*>(o) = v;
}

}  // namespace

cudaError_t LaunchMlaMerge(MlaPartials partials, const KParams& p, int batch, cudaStream_t stream) {
  if (partials == MlaPartials::kF16) {
    MlaMergeHalfKernel<<<dim3((p.rows + 1) / 2, batch), 128, 0, stream>>>(p);
  } else {
    MlaMergeKernel<<<dim3(p.rows, batch), 128, 0, stream>>>(p);
  }
  return cudaGetLastError();
}

}  // namespace mla
}  // namespace gpu
}  // namespace kernelserve
