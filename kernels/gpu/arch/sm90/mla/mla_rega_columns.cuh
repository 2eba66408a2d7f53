// The RegA kernel's per-column (query row) values: the accumulator's column
// map, shared-memory tables indexed by it, reductions over a warp's column
// groups, and a barrier that ORs a predicate over the threads it joins.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM90_MLA_MLA_REGA_COLUMNS_CUH_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM90_MLA_MLA_REGA_COLUMNS_CUH_

#include <cstdint>

namespace kernelserve {
namespace gpu {
namespace mla {

// A barrier of `count` threads that returns whether any of them passed true.
__device__ __forceinline__ bool BarRedOr(int id, int count, bool pred) {
  int r;
  asm volatile(
      "{\n.reg .pred p, q;\nsetp.ne.s32 p, %1, 0;\nbar.red.or.pred q, %2, %3, p;\nselp.s32 %0, 1, 0, q;\n}\n"
      : "=r"(r)
      : "r"(static_cast<int>(pred)), "r"(id), "r"(count)
      : "memory");
  return r != 0;
}

// A thread's kN / 4 columns (query rows) of an m64nN accumulator (N = kN,
// 64, 32 or 16) are q = 8 jj + 2 c + e (jj < kN / 8, e 0..1, c = lane & 3).
// Per-column tables in shared memory are stored [c][jj][e], so a thread
// reads its kN / 4 with 16-byte loads that lanes of the same c share.
template <int kN>
__device__ __forceinline__ int ColIndex(int q) {
  return ((q >> 1) & 3) * (kN / 4) + (q >> 3) * 2 + (q & 1);
}
// The column whose table position is `pos` (the inverse of ColIndex).
template <int kN>
__device__ __forceinline__ int ColOfIndex(int pos) {
  constexpr int kShift = kN == 64 ? 4 : kN == 32 ? 3 : 2;  // log2(kN / 4)
  const int c = pos >> kShift, r = pos & (kN / 4 - 1);
  return (r >> 1) * 8 + 2 * c + (r & 1);
}
template <int kN>
__device__ __forceinline__ void LoadCols(const float* table, int c, float (&v)[kN / 4]) {
  const float4* t = reinterpret_cast<const float4*>(table + c * (kN / 4));
#pragma unroll
  for (int i = 0; i < kN / 16; ++i) {
    const float4 x = t[i];
    v[4 * i] = x.x;
    v[4 * i + 1] = x.y;
    v[4 * i + 2] = x.z;
    v[4 * i + 3] = x.w;
  }
}
template <int kN>
__device__ __forceinline__ void StoreCols(float* table, int c, const float (&v)[kN / 4]) {
  float4* t = reinterpret_cast<float4*>(table + c * (kN / 4));
#pragma unroll
  for (int i = 0; i < kN / 16; ++i) t[i] = make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
}

// One halving step of ReduceColumns: lanes whose bit `kXor` of the lane id is
// set keep the upper half of `v`, the others the lower half, each combined
// with the partner's copy of that half.
template <bool kMax, int kV, int kXor>
__device__ __forceinline__ void HalveColumns(const float (&v)[kV], int lane, float (&out)[kV / 2]) {
#pragma unroll
  for (int i = 0; i < kV / 2; ++i) {
    const bool hi = lane & kXor;
    const float send = hi ? v[i] : v[kV / 2 + i];
    const float mine = hi ? v[kV / 2 + i] : v[i];
    const float other = __shfl_xor_sync(0xffffffffu, send, kXor);
    out[i] = kMax ? fmaxf(mine, other) : mine + other;
  }
}

// The jj of the two columns a lane holds after ReduceColumns<kN>: g for
// kN = 64, g / 2 for kN = 32 (lanes g, g ^ 1 hold the same), g / 4 for
// kN = 16 (lanes g, g ^ 1, g ^ 2, g ^ 3 hold the same).
template <int kN>
__device__ __forceinline__ int LaneColGroup(int lane) {
  return (lane >> 2) / (64 / kN);
}

// kN / 4 per-column values (index jj * 2 + e) reduced over the 8 lanes of a
// column group (lanes c, c + 4, ..., c + 28): by halving while more than two
// values are left, then by exchange. Lane (g, c) ends with the two values of
// columns 8 LaneColGroup(lane) + 2 c + e.
template <bool kMax, int kN>
__device__ __forceinline__ void ReduceColumns(const float (&v)[kN / 4], int lane, float (&out)[2]) {
  static_assert(kN == 64 || kN == 32 || kN == 16, "64, 32 or 16 query rows per CTA");
  if constexpr (kN == 64) {
    float a8[8], a4[4];
    HalveColumns<kMax, 16, 16>(v, lane, a8);
    HalveColumns<kMax, 8, 8>(a8, lane, a4);
    HalveColumns<kMax, 4, 4>(a4, lane, out);
  } else if constexpr (kN == 32) {
    // Lane bit 4 picks jj's high bit, bit 3 its low bit; lanes g and g ^ 1
    // then exchange.
    float a4[4];
    HalveColumns<kMax, 8, 16>(v, lane, a4);
    HalveColumns<kMax, 4, 8>(a4, lane, out);
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const float other = __shfl_xor_sync(0xffffffffu, out[e], 4);
      out[e] = kMax ? fmaxf(out[e], other) : out[e] + other;
    }
  } else {
    HalveColumns<kMax, 4, 16>(v, lane, out);
#pragma unroll
    for (int o = 8; o >= 4; o >>= 1) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float other = __shfl_xor_sync(0xffffffffu, out[e], o);
        out[e] = kMax ? fmaxf(out[e], other) : out[e] + other;
      }
    }
  }
}

}  // namespace mla
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM90_MLA_MLA_REGA_COLUMNS_CUH_
