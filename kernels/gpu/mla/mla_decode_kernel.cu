// MLA absorbed decode (a16w8) for sm_90: bf16 queries against fp8 KV rows of
// 576 (latent 512 + rope 64), one row being both K (576) and V (first 512).
//
// One CTA = (KV split, group of 64 query rows, request). The 64 rows are the
// flattened (draft position, head) pairs of one request, so every head of a
// group shares each KV tile, read from memory once per group. With several
// splits, the partial outputs and their (max, sum) go to a workspace and a
// merge kernel combines them in split order: the result does not depend on
// scheduling. This file: the split plan, the merge kernels and the launcher;
// the kernels are in mla_decode_rega.cu (v8, the default: KV converted in
// registers as the wgmma A operand), mla_decode_roles.cu (v7),
// mla_decode_pipe.cu (v6) and mla_decode_v4.cu (v1..v5: mma.sync and
// lockstep wgmma).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include <cuda_fp16.h>

#include "kernels/gpu/mla/mla_decode_launch.h"
#include "kernels/gpu/mla/mla_kernel_common.cuh"

namespace kernelserve {
namespace cuda_mla {
namespace {

// The first partial of (request b, row r) (split s at + s * kRows), or -1 for
// a row past the request's q_len (the merge writes it as zeros).
__device__ __forceinline__ int64_t MergeRowBase(const KParams& p, int b, int r) {
  const int ql = p.q_lens ? p.q_lens[b] : p.q_len;
  if (r / p.heads >= ql) return -1;
  return (static_cast<int64_t>(b) * p.row_groups + r / kRows) * p.splits * kRows + r % kRows;
}

// Combines the fp32 partials (v4..v7: unnormalized O) of one (request, row)
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
    const float w = exp2f(m - m_max);
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

// v8's merge: combines the f16 partials (O / l) of one (request, row) in
// split order, 64 threads per row, 8 columns each. Every split's (m, l) and
// partial are loaded before any is used (kMergeBatch splits at once), so this
// waits for one memory round trip, not one per split. Every split wrote its
// partial (zeros and m = -Inf when empty). The partials are read once: loads
// skip L1.
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
  const __half* part = reinterpret_cast<const __half*>(p.part_o);
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
        ml[i] = __ldcg(ml_all + pi);
        h[i] = __ldcg(reinterpret_cast<const uint4*>(part + pi * kDL + col));
      }
    }
    float bm = m_max;
#pragma unroll
    for (int i = 0; i < kMergeBatch; ++i) bm = fmaxf(bm, ml[i].x);
    if (m_max != -INFINITY && bm != m_max) {  // only past kMergeBatch splits
      const float sc = exp2f(m_max - bm);
      l *= sc;
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[j] *= sc;
    }
    m_max = bm;
#pragma unroll
    for (int i = 0; i < kMergeBatch; ++i) {
      const float wl = ml[i].x == -INFINITY ? 0.f : exp2f(ml[i].x - m_max) * ml[i].y;
      const uint32_t w[4] = {h[i].x, h[i].y, h[i].z, h[i].w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 v = __half22float2(*reinterpret_cast<const __half2*>(&w[j]));
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

MlaSplitPlan PlanMlaSplits(int batch, int q_len, int heads, int64_t max_seq, int num_splits,
                           int num_sms) {
  MlaSplitPlan plan;
  plan.row_groups = (q_len * heads + kRows - 1) / kRows;
  const int64_t max_tiles = (max_seq + kTok - 1) / kTok;
  int64_t s_best = 1;
  if (num_splits > 0) {
    s_best = std::min<int64_t>(num_splits, max_tiles);
  } else {
    // Time ~ waves x (tiles per CTA + a fixed start cost), plus a little for
    // the merge; the fewest splits win ties.
    const int64_t ctas_per_split = static_cast<int64_t>(batch) * plan.row_groups;
    double best = 1e30;
    for (int64_t s = 1; s <= std::min<int64_t>(max_tiles, 1024); ++s) {
      const int64_t tiles = (max_tiles + s - 1) / s;
      const int64_t waves = (ctas_per_split * s + num_sms - 1) / num_sms;
      const double cost = static_cast<double>(waves) * (tiles + 2) + (s > 1 ? 1.0 : 0.0);
      if (cost < best - 1e-9) {
        best = cost;
        s_best = s;
      }
    }
  }
  const int64_t tiles_per = (max_tiles + s_best - 1) / s_best;
  plan.chunk = tiles_per * kTok;
  plan.splits = static_cast<int>((max_seq + plan.chunk - 1) / plan.chunk);
  return plan;
}

cudaError_t LaunchMlaDecode(const MlaDecodeArgs& a, cudaStream_t stream) {
  cudaError_t e;
  int dev = 0, sms = 0;
  if ((e = cudaGetDevice(&dev)) != cudaSuccess) return e;
  if ((e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess) return e;
  // kWgmmaPipe and kWgmmaRoles cover every shape v4 does (same CTA rows,
  // tiles and split plan: paged or not, any page size, ragged q_lens, q_len
  // 1..8, H up to 128, any split count); they fall back to v4 only on a device
  // whose per-block shared memory is under theirs (226 / 231.7 KB; H100/H200
  // have 227 KB).
  // kWgmmaRegA covers the same shapes for e4m3fn; e4m3fnuz runs kWgmmaRoles.
  MlaVariant variant = a.variant;
  if (variant == MlaVariant::kWgmmaRegA && a.fnuz) variant = MlaVariant::kWgmmaRoles;
  if (variant == MlaVariant::kWgmmaPipe || variant == MlaVariant::kWgmmaRoles ||
      variant == MlaVariant::kWgmmaRegA) {
    int smem_optin = 0;
    if ((e = cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev)) != cudaSuccess) {
      return e;
    }
    const int need = variant == MlaVariant::kWgmmaPipe    ? kSmemBytesPipe
                     : variant == MlaVariant::kWgmmaRoles ? kSmemBytesRoles
                                                          : kSmemBytesRegA;
    if (smem_optin < need) variant = MlaVariant::kWgmmaPv;
  }
  KernelFn kernel;
  switch (variant) {
    case MlaVariant::kMmaSync:
      kernel = V4Kernel(a.fnuz, 0);
      break;
    case MlaVariant::kWgmma:
      kernel = V4Kernel(a.fnuz, 1);
      break;
    case MlaVariant::kWgmmaPvSw:
      kernel = V4Kernel(a.fnuz, 3);
      break;
    case MlaVariant::kWgmmaPipe:
      kernel = PipeKernel(a.fnuz);
      break;
    case MlaVariant::kWgmmaRoles:
      kernel = RolesKernel(a.fnuz);
      break;
    case MlaVariant::kWgmmaRegA:
      kernel = RegAKernel(a.fnuz);
      break;
    default:
      kernel = V4Kernel(a.fnuz, 2);
      break;
  }
  const int smem_bytes = variant == MlaVariant::kWgmmaPvSw    ? kSmemBytesSw
                         : variant == MlaVariant::kWgmmaPipe  ? kSmemBytesPipe
                         : variant == MlaVariant::kWgmmaRoles ? kSmemBytesRoles
                         : variant == MlaVariant::kWgmmaRegA  ? kSmemBytesRegA
                                                              : kSmemBytes;
  const int threads = variant == MlaVariant::kWgmmaRegA ? kThreadsRegA : kThreads;
  if ((e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes)) != cudaSuccess) {
    return e;
  }

  const MlaSplitPlan plan = PlanMlaSplits(a.batch, a.q_len, a.heads, a.max_seq, a.num_splits, sms);
  KParams p{};
  p.q_lat = static_cast<const uint16_t*>(a.q_lat);
  p.q_pe = static_cast<const uint16_t*>(a.q_pe);
  p.kv = static_cast<const uint8_t*>(a.kv);
  p.out = static_cast<uint16_t*>(a.out);
  p.seq_lens = a.seq_lens;
  p.kv_indices = a.kv_indices;
  p.kv_indptr = a.kv_indptr;
  p.q_lens = a.q_lens;
  p.q_len = a.q_len;
  p.heads = a.heads;
  p.rows = a.q_len * a.heads;
  p.row_groups = plan.row_groups;
  p.splits = plan.splits;
  p.page_size = a.page_size;
  p.paged = a.paged ? 1 : 0;
  p.rounding = a.rounding;
  p.chunk = plan.chunk;
  p.kv_seq = a.kv_seq;
  p.sl2 = static_cast<float>(a.scale * a.kv_scale * 1.4426950408889634);
  p.out_scale = static_cast<float>(a.kv_scale);

  void* ws = nullptr;
  if (plan.splits > 1) {
    const int64_t parts = static_cast<int64_t>(a.batch) * plan.row_groups * plan.splits * kRows;
    const size_t bytes = static_cast<size_t>(parts) * (kDL + 2) * sizeof(float);
    if ((e = cudaMallocAsync(&ws, bytes, stream)) != cudaSuccess) return e;
    p.part_o = static_cast<float*>(ws);
    p.part_ml = p.part_o + parts * kDL;
  }
  const dim3 grid(plan.splits, plan.row_groups, a.batch);
  kernel<<<grid, threads, smem_bytes, stream>>>(p);
  e = cudaGetLastError();
  if (e == cudaSuccess && plan.splits > 1) {
    if (variant == MlaVariant::kWgmmaRegA) {  // f16 O / l partials
      MlaMergeHalfKernel<<<dim3((p.rows + 1) / 2, a.batch), 128, 0, stream>>>(p);
    } else {
      MlaMergeKernel<<<dim3(p.rows, a.batch), 128, 0, stream>>>(p);
    }
    e = cudaGetLastError();
  }
  if (ws != nullptr) {
    const cudaError_t f = cudaFreeAsync(ws, stream);
    if (e == cudaSuccess) e = f;
  }
  return e;
}

}  // namespace cuda_mla
}  // namespace kernelserve
