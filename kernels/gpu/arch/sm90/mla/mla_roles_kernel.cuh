// The roles kernel: bf16 wgmma on KV unpacked from e4m3fnuz into shared
// memory, the two warpgroups of a CTA in different roles instead of the
// same phases behind CTA barriers.
// - Warpgroup 0: S = Q K^T for the whole 64-token tile on m64n64 (Q read from
//   shared memory once per tile, not once per warpgroup; N = 64 has half the
//   operand bytes per FLOP of m64n32), the softmax (a row's 64 scores sit in
//   4 lanes of one warp: the max needs no exchange), P, and PV for the
//   output columns [0, 256). It unpacks kC0 of the 18 chunks per thread of
//   the next tile while its own QK^T runs.
// - Warpgroup 1: loads and unpacks the other 18 - kC0 chunks per thread of
//   the next tile, keeps the slot tables, and does PV for [256, 512).
// Four named barriers hand the buffers over (KREADY: tile t+1 unpacked;
// KFREE: warpgroup 0 done with the buffer tile t+1 goes into; PREADY: P(t)
// and its rescale factors written; PFREE: warpgroup 1's PV(t) retired); no
// CTA barrier in the loop. Shared memory: Q, two bf16 KV tiles, one P, plus
// the factors, row sums and three slot tables.
//
// Numerics (tests compare with the fp64 oracle): e4m3fnuz -> bf16 is exact;
// P is rounded to bf16 and the row sum counts the rounded values that PV
// multiplies; the row sums are kept per lane and reduced once at the end.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM90_MLA_MLA_ROLES_KERNEL_CUH_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM90_MLA_MLA_ROLES_KERNEL_CUH_

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/gpu/arch/sm90/mla/mla_roles_epilogue.cuh"
#include "kernels/gpu/arch/sm90/mla/mla_roles_unpack.cuh"
#include "kernels/gpu/arch/sm90/mla/mla_sm90_common.cuh"
#include "kernels/gpu/common/bf16.cuh"
#include "kernels/gpu/mla/mla_decode_params.h"
#include "kernels/gpu/mla/mla_tile_scheduler.cuh"

namespace kernelserve {
namespace gpu {
namespace mla {

// Chunks per thread that warpgroup 0 unpacks (of 18): the fastest split of
// the unpack between the warpgroups (bench/NOTES.md); fewer spill, more
// break the warps' 64-byte reads across rows.
constexpr int kRolesC0 = 6;
constexpr int kBarKReady = 1, kBarKFree = 2, kBarPReady = 3, kBarPFree = 4;
constexpr int kPTileBytes = kRows * kTok * 2;  // P, core-tiled: 8 KB
// Q, two KV tiles, P, three per-row tables (factors, sums, maxima), three
// slot tables.
constexpr int kSmemBytesRoles = 3 * kTileBytes16 + kPTileBytes + 3 * kRows * 4 + 3 * kTok * 8;
static_assert(kSmemBytesRoles <= 227 * 1024, "the roles kernel must fit the sm_90 per-block limit");
constexpr int kRolesUnits = kTok / 8 * (kD / 16);  // 8-row x 16-byte units per tile: 288
static_assert(kRolesUnits == 16 * 18, "16 quarter-warp slots per warpgroup, 18 units each");

__device__ __forceinline__ float WarpMax4(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float WarpSum4(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

template <int kC0>
__global__ void __launch_bounds__(kRolesThreads, 1) MlaDecodeRolesKernel(const KParams p) {
  constexpr int kC1 = 18 - kC0;
  constexpr int kN0 = 2 * kC0, kN1 = 36 - kN0;  // chunks per raw row of each warpgroup
  static_assert(kN0 >= 4 && kN0 - 4 <= 16, "warpgroup 0 holds the rope and latent chunks < 16 only");
  extern __shared__ __align__(16) uint8_t smem_raw[];
  uint8_t* sQ = smem_raw;
  uint8_t* sK0 = sQ + kTileBytes16;  // KV tile buffers 0 and 1
  uint8_t* sP = sK0 + 2 * kTileBytes16;
  float* sAlpha = reinterpret_cast<float*>(sP + kPTileBytes);  // [64] rescale of tile t
  float* sL = sAlpha + kRows;                             // [64] row sums (end)
  float* sM = sL + kRows;                                 // [64] row maxima (end)
  int64_t* sSlot = reinterpret_cast<int64_t*>(sM + kRows);  // [3][64]: tile t's rows in [t % 3]

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  // The role from a shfl-broadcast warpgroup index, which ptxas knows to be
  // uniform: wgmma in a branch on it is not serialized (C7520).
  const int wg = WarpUniform(warp >> 2), wq = warp & 3;
  const CtaWork w = GetCtaWork(p);
  const int split = w.split, group = w.group, b = w.b;
  const int ql = w.ql, n_tiles = w.n_tiles, row0 = w.row0, nrows = w.nrows;
  const int64_t seq = w.seq, tok_begin = w.tok_begin, tok_end = w.tok_end;

  auto slot_of = [&](int64_t j) { return SlotOf(p, w, j); };

  // Unpack map. A unit is 8 rows (8 k + (lane & 7)) x one 16-byte chunk cc of
  // the raw rows; quarter-warp slot s of a warpgroup takes its units s + 16 j.
  // Warpgroup 0 owns the rope chunks 32..35 and chunks 0..kN0-5 (latent
  // columns < 256: read only by its own QK^T and PV), so it can refill them as
  // soon as its own wgmma retire; warpgroup 1 owns chunks kN0-4..31. A
  // quarter-warp stores 8 rows of one core-matrix column (conflict-free).
  const int qslot = wq * 4 + (lane >> 3);
  const int row_in = lane & 7;
  uint4 raw[kC1 > kC0 ? kC1 : kC0];
  // Unit j of this thread: row group k, 16-byte column chunk cc of the raw row.
  auto unit = [&](int j, int& k, int& cc) {
    const int v = qslot + 16 * j;
    if (wg == 0) {
      k = v / kN0;
      const int ci = v - k * kN0;
      cc = ci < 4 ? 32 + ci : ci - 4;
    } else {
      k = v / kN1;
      cc = kN0 - 4 + (v - k * kN1);
    }
  };
  auto load_units = [&](const int64_t* slots, auto count) {
#pragma unroll
    for (int j = 0; j < decltype(count)::value; ++j) {
      int k, cc;
      unit(j, k, cc);
      const int64_t slot = slots[8 * k + row_in];
      raw[j] = LdgStreamOrZero(p.kv + (slot >= 0 ? slot : 0) * kD + 16 * cc, slot >= 0);
    }
  };
  auto unpack_units = [&](uint8_t* buf, auto count) {
#pragma unroll
    for (int j = 0; j < decltype(count)::value; ++j) {
      int k, cc;
      unit(j, k, cc);
      UnpackChunk(buf + CoreTiled(8 * k + row_in, 16 * cc), raw[j]);
    }
  };
  using C0 = std::integral_constant<int, kC0>;
  using C1 = std::integral_constant<int, kC1>;

  // Prologue: the slot tables of tiles 0..2; tile 0 unpacked into buffer 0
  // by both warpgroups; tile 1 in registers; Q.
  if (tid < kTok) {
    sSlot[tid] = slot_of(tok_begin + tid);
    sSlot[kTok + tid] = slot_of(tok_begin + kTok + tid);
    sSlot[2 * kTok + tid] = slot_of(tok_begin + 2 * kTok + tid);
  }
  const int wg1_tid = tid - 128;
  int64_t slot_next = -1;  // warpgroup 1: tile t+3's row, written in iteration t
  if (wg == 1 && wg1_tid < kTok) slot_next = slot_of(tok_begin + 3 * kTok + wg1_tid);
  __syncthreads();
  if (n_tiles > 0) {
    if (wg == 0) {
      load_units(sSlot, C0{});
    } else {
      load_units(sSlot, C1{});
    }
  }
  LoadQCoreTiled(sQ, p, w, tid);
  if (n_tiles > 0) {
    if (wg == 0) {
      unpack_units(sK0, C0{});
    } else {
      unpack_units(sK0, C1{});
    }
  }
  if (n_tiles > 1) {
    if (wg == 0) {
      load_units(sSlot + kTok, C0{});
    } else {
      load_units(sSlot + kTok, C1{});
    }
  }
  FenceProxyAsync();
  __syncthreads();  // sQ and tile 0 visible; the slot tables of tiles 0..2 read or visible

  constexpr uint64_t kTileDesc = kTileBytes16 >> 4;
  constexpr int kRowGroupBytes = (kD / 8) * 128;
  const uint64_t q_desc = MakeSmemDescInterleave(SmemAddr(sQ), 128, kRowGroupBytes);
  const uint64_t k_desc0 = MakeSmemDescInterleave(SmemAddr(sK0), 128, kRowGroupBytes);
  const uint64_t p_desc = MakeSmemDescInterleave(SmemAddr(sP), 128, (kTok / 8) * 128);
  const uint64_t v_desc0 = MakeSmemDescInterleave(SmemAddr(sK0 + wg * 32 * 128), kRowGroupBytes, 128);
  auto issue_pv = [&](float (&acc)[128], int buf) {
#pragma unroll
    for (int ks = 0; ks < kTok / 16; ++ks) {
      WgmmaSS<256, Bf16, true>(acc, p_desc + ks * (256 >> 4),
                                v_desc0 + buf * kTileDesc + ks * ((2 * kRowGroupBytes) >> 4), 1);
    }
  };

  float acc[128];  // this warpgroup's 256 output columns
#pragma unroll
  for (int i = 0; i < 128; ++i) acc[i] = 0.f;
  float m2[2] = {-INFINITY, -INFINITY}, l2[2] = {0.f, 0.f};  // warpgroup 0: its two rows

  if (wg == 0) {
    int64_t lim_qk[2];  // last visible token of the rows; -1: row masked
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int row = wq * 16 + hf * 8 + (lane >> 2);
      const int t = (row0 + row) / p.heads;
      lim_qk[hf] = (row < nrows && t < ql) ? seq - ql + t : -1;
    }
    for (int it = 0; it < n_tiles; ++it) {
      const int64_t j0 = tok_begin + static_cast<int64_t>(it) * kTok;
      const int cur = it & 1;
      if (it >= 1) NamedBarrierSync(kBarKReady, kRolesThreads);  // tile `it` complete in buffer `cur`
      // PV(it-1) on our columns, then S = Q K^T(it); both async.
      WgmmaFence();
      if (it >= 1) issue_pv(acc, cur ^ 1);
      WgmmaCommit();
      float d[32];
#pragma unroll
      for (int i = 0; i < 32; ++i) d[i] = 0.f;
#pragma unroll
      for (int ks = 0; ks < kD / 16; ++ks) {
        WgmmaSS<64, Bf16>(d, q_desc + ks * (256 >> 4), k_desc0 + cur * kTileDesc + ks * (256 >> 4), 1);
      }
      WgmmaCommit();
      WgmmaWait<1>();  // our PV(it-1) retired: done with buffer cur ^ 1
      const bool next = it + 1 < n_tiles;
      if (it >= 1 && next) NamedBarrierArrive(kBarKFree, kRolesThreads);
      if (next) {  // our chunks of tile it+1: read only by our own QK^T(it-1) and PV(it-1)
        unpack_units(sK0 + (cur ^ 1) * kTileBytes16, C0{});
        FenceProxyAsync();
      }
      if (it + 2 < n_tiles) load_units(sSlot + ((it + 2) % 3) * kTok, C0{});
      WgmmaWait<0>();
#pragma unroll
      for (int i = 0; i < 32; ++i) FenceOperand(d[i]);

      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        const int64_t j = j0 + (i >> 2) * 8 + (lane & 3) * 2 + (i & 1);
        const int hf = (i >> 1) & 1;
        float v = d[i] * p.sl2;
        if (j >= tok_end || j > lim_qk[hf]) v = -INFINITY;
        d[i] = v;
        mx[hf] = fmaxf(mx[hf], v);
      }
      float alpha[2], m_use[2];
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const float mn = fmaxf(m2[hf], WarpMax4(mx[hf]));
        m_use[hf] = mn == -INFINITY ? 0.f : mn;
        alpha[hf] = exp2f(m2[hf] - m_use[hf]);
        m2[hf] = mn;
      }
      if (it >= 1) NamedBarrierSync(kBarPFree, kRolesThreads);  // warpgroup 1 done with P(it-1)
      float sum[2] = {0.f, 0.f};
      const int prow = wq * 16 + (lane >> 2);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        const uint32_t lo = PackBf16x2Rn(exp2f(d[4 * nt] - m_use[0]), exp2f(d[4 * nt + 1] - m_use[0]));
        const uint32_t hi = PackBf16x2Rn(exp2f(d[4 * nt + 2] - m_use[1]), exp2f(d[4 * nt + 3] - m_use[1]));
        // The sum counts the rounded probabilities that PV multiplies.
        sum[0] += Bf16LoToFloat(lo) + Bf16HiToFloat(lo);
        sum[1] += Bf16LoToFloat(hi) + Bf16HiToFloat(hi);
        const int col = nt * 8 + (lane & 3) * 2;
        uint8_t* base = sP + ((prow >> 3) * (kTok / 8) + (col >> 3)) * 128 + (col & 7) * 2;
        *reinterpret_cast<uint32_t*>(base + (prow & 7) * 16) = lo;
        *reinterpret_cast<uint32_t*>(base + (kTok / 8) * 128 + (prow & 7) * 16) = hi;  // row + 8
      }
      if ((lane & 3) == 0) {
        sAlpha[prow] = alpha[0];
        sAlpha[prow + 8] = alpha[1];
      }
      FenceProxyAsync();
      __threadfence_block();
      NamedBarrierArrive(kBarPReady, kRolesThreads);
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) l2[hf] = l2[hf] * alpha[hf] + sum[hf];
      if (alpha[0] != 1.f || alpha[1] != 1.f) {
#pragma unroll
        for (int i = 0; i < 128; ++i) acc[i] *= alpha[(i >> 1) & 1];
      }
    }
    if (n_tiles > 0) {
      WgmmaFence();
      issue_pv(acc, (n_tiles - 1) & 1);
      WgmmaCommit();
      WgmmaWait<0>();
    }
#pragma unroll
    for (int i = 0; i < 128; ++i) FenceOperand(acc[i]);
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) l2[hf] = WarpSum4(l2[hf]);
    if ((lane & 3) == 0) {
      const int row = wq * 16 + (lane >> 2);
      sL[row] = l2[0];
      sL[row + 8] = l2[1];
      sM[row] = m2[0];
      sM[row + 8] = m2[1];
    }
  } else {
    for (int it = 0; it < n_tiles; ++it) {
      const int64_t j0 = tok_begin + static_cast<int64_t>(it) * kTok;
      const int cur = it & 1;
      if (it + 1 < n_tiles) {
        if (it >= 1) NamedBarrierSync(kBarKFree, kRolesThreads);  // warpgroup 0's PV(it-1) retired
        unpack_units(sK0 + (cur ^ 1) * kTileBytes16, C1{});
        FenceProxyAsync();
        if (wg1_tid < kTok) {
          sSlot[(it % 3) * kTok + wg1_tid] = slot_next;  // tile it+3 (tile it's rows are read)
          slot_next = slot_of(j0 + 4 * kTok + wg1_tid);
        }
        __threadfence_block();
        NamedBarrierArrive(kBarKReady, kRolesThreads);
        if (it + 2 < n_tiles) load_units(sSlot + ((it + 2) % 3) * kTok, C1{});
      }
      NamedBarrierSync(kBarPReady, kRolesThreads);  // P(it) and its factors
      float alpha[2];
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) alpha[hf] = sAlpha[wq * 16 + hf * 8 + (lane >> 2)];
      if (alpha[0] != 1.f || alpha[1] != 1.f) {
#pragma unroll
        for (int i = 0; i < 128; ++i) acc[i] *= alpha[(i >> 1) & 1];
      }
      WgmmaFence();
      issue_pv(acc, cur);
      WgmmaCommit();
      WgmmaWait<0>();
#pragma unroll
      for (int i = 0; i < 128; ++i) FenceOperand(acc[i]);
      if (it + 1 < n_tiles) NamedBarrierArrive(kBarPFree, kRolesThreads);
    }
  }
  __syncthreads();  // sL, sM visible
  if (wg == 1) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int row = wq * 16 + hf * 8 + (lane >> 2);
      l2[hf] = sL[row];
      m2[hf] = sM[row];
    }
  }

  WriteRows(p, acc, l2, m2, b, group, split, row0, nrows, ql, wq, wg, lane);
}

}  // namespace mla
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM90_MLA_MLA_ROLES_KERNEL_CUH_
