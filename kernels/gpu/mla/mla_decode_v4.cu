// MLA decode v4 family (kVar 0..3; kVar 2 is "v4" in bench/NOTES.md): the
// lockstep CTA. Both warpgroups run the same phases behind CTA barriers: cp.async
// of the raw fp8 rows, one unpack to bf16 in shared memory, QK^T, softmax, PV.
#include <cmath>
#include <cstdint>

#include "kernels/gpu/mla/mla_kernel_common.cuh"

namespace kernelserve {
namespace cuda_mla {
namespace {

// Byte offset of (row, k) in a 128-byte-swizzled tile of 64 rows: blocks of
// 64 columns (8 KB each, [64 rows][128 bytes]), the 16-byte chunk c of row r
// stored at chunk c ^ (r & 7). Q, the KV tile and P use it in kVar 3.
__device__ __forceinline__ int Sw128(int row, int k) {
  return (k >> 6) * (64 * 128) + row * 128 + ((((k >> 3) & 7) ^ (row & 7)) << 4) + (k & 7) * 2;
}

// Byte offset of (row, k) in the wgmma operand layout of kVar (1, 2: core
// matrices, no swizzle; 3: 128-byte swizzle).
template <int kVar>
__device__ __forceinline__ int WgTiled(int row, int k) {
  return kVar == 3 ? Sw128(row, k) : CoreTiled(row, k);
}


// kVar 0: everything on mma.sync with ldmatrix from padded row-major tiles.
// kVar 1: QK^T on wgmma (Q and KV in the core-tiled layout), PV on mma.sync.
// kVar 2: PV on wgmma too: warpgroup g owns output columns [256 g, +256) of
// all 64 rows (m64n256k16, P core-tiled in smem, V read as an MN-major
// operand from the same KV tile).
// kVar 3: kVar 2 with Q, the KV tile and P in the 128-byte-swizzled layout
// (Sw128) that the attention kernel's wgmma reads, instead of core matrices.
template <bool kFnuz, int kVar>
__global__ void __launch_bounds__(kThreads, 1) MlaDecodeKernel(const KParams p) {
  constexpr bool kWg = kVar >= 1;
  constexpr bool kPvWg = kVar >= 2;
  constexpr bool kSw = kVar == 3;
  extern __shared__ __align__(16) uint8_t smem_raw[];
  uint8_t* smem = smem_raw;
  if (kSw) smem += (1024u - (SmemAddr(smem_raw) & 1023u)) & 1023u;
  uint16_t* sQ = reinterpret_cast<uint16_t*>(smem);
  uint16_t* sK = reinterpret_cast<uint16_t*>(smem + kSmemQ);
  uint8_t* sRaw = smem + kSmemQ + kSmemK;
  uint16_t* sP = reinterpret_cast<uint16_t*>(sRaw + kSmemRaw);
  float* sMax = reinterpret_cast<float*>(smem + kSmemQ + kSmemK + kSmemRaw + kSmemP);  // [2][64]
  float* sSum = sMax + 2 * kRows;                                                      // [2][64]
  int64_t* sSlot = reinterpret_cast<int64_t*>(sSum + 2 * kRows);  // KV row of each token of the next tile

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const CtaWork w = GetCtaWork(p);
  const int split = w.split, group = w.group, b = w.b;
  const int ql = w.ql, n_tiles = w.n_tiles, row0 = w.row0, nrows = w.nrows;
  const int64_t seq = w.seq, tok_begin = w.tok_begin, tok_end = w.tok_end;

  // Pool row of token j, or -1 past this split's chunk.
  auto slot_of = [&](int64_t j) { return SlotOf(p, w, j); };
  // Rows come from sSlot, filled one tile ahead so the index loads stay off
  // the path to the copies.
  auto issue_tile = [&]() {
    for (int c = tid; c < kTok * (kD / 16); c += kThreads) {
      const int r = c / (kD / 16), col = c % (kD / 16);
      const int64_t slot = sSlot[r];
      const uint8_t* src = slot >= 0 ? p.kv + slot * kD + col * 16 : p.kv;
      CpAsync16(SmemAddr(sRaw + r * kRawStr + col * 16), src, slot >= 0 ? 16 : 0);
    }
    CpAsyncCommit();
  };

  int64_t slot_next = -1;
  if (tid < kTok) {
    sSlot[tid] = slot_of(tok_begin + tid);
    slot_next = slot_of(tok_begin + kTok + tid);
  }
  __syncthreads();
  if (n_tiles > 0) issue_tile();

  // Queries of this group to shared memory; rows past the request are zeros.
  {
    const uint16_t* qlat = p.q_lat + (static_cast<int64_t>(b) * p.rows + row0) * kDL;
    const uint16_t* qpe = p.q_pe + (static_cast<int64_t>(b) * p.rows + row0) * kDR;
    for (int c = tid; c < kRows * (kD / 8); c += kThreads) {
      const int r = c / (kD / 8), col = c % (kD / 8);
      uint4 v = make_uint4(0, 0, 0, 0);
      if (r < nrows) {
        v = col < kDL / 8 ? reinterpret_cast<const uint4*>(qlat + static_cast<int64_t>(r) * kDL)[col]
                          : reinterpret_cast<const uint4*>(qpe + static_cast<int64_t>(r) * kDR)[col - kDL / 8];
      }
      if (kWg) {
        *reinterpret_cast<uint4*>(reinterpret_cast<uint8_t*>(sQ) + WgTiled<kVar>(r, col * 8)) = v;
      } else {
        *reinterpret_cast<uint4*>(sQ + r * kStr + col * 8) = v;
      }
    }
    if (kWg) FenceProxyAsync();
  }

  // This thread's rows in the mma accumulator layout: m-tile mi, half hf.
  const int qk_mi = warp & 3, qk_nh = warp >> 2;
  int64_t lim_qk[2];  // last visible token of the QK rows; -1: row masked
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int row = qk_mi * 16 + hf * 8 + (lane >> 2);
    const int t = (row0 + row) / p.heads;
    lim_qk[hf] = (row < nrows && t < ql) ? seq - ql + t : -1;
  }

  float m_run[4][2], l_run[4][2];
  float acc[4][8][4];  // kPvWg: the m64n256 accumulator, flat (see accw)
  float* accw = &acc[0][0][0];
  float m2[2] = {-INFINITY, -INFINITY}, l2[2] = {0.f, 0.f};  // kPvWg: this thread's two rows
#pragma unroll
  for (int mi = 0; mi < 4; ++mi) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      m_run[mi][hf] = -INFINITY;
      l_run[mi][hf] = 0.f;
    }
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][nt][e] = 0.f;
    }
  }

  const uint32_t a_base = SmemAddr(sQ + (qk_mi * 16 + (lane & 15)) * kStr + (lane >> 4) * 8);
  const uint32_t b_base =
      SmemAddr(sK + (qk_nh * 32 + (lane >> 4) * 8 + (lane & 7)) * kStr + ((lane >> 3) & 1) * 8);
  const uint32_t p_base = SmemAddr(sP + (lane & 15) * kPStr + (lane >> 4) * 8);
  // PV's V operand: ldmatrix.trans row addresses; per 16 tokens (ks) and per
  // 16 dims (q) the address moves by v_ks and v_q bytes.
  const uint32_t v_base =
      kWg ? SmemAddr(reinterpret_cast<uint8_t*>(sK) +
                     ((((lane >> 3) & 1) * (kD / 8) + warp * 8 + (lane >> 4)) * 128 + (lane & 7) * 16))
          : SmemAddr(sK + ((lane & 7) + ((lane >> 3) & 1) * 8) * kStr + warp * 64 + (lane >> 4) * 8);
  const uint32_t v_ks = kWg ? 2 * (kD / 8) * 128 : 16 * kStr * 2;
  const uint32_t v_q = kWg ? 2 * 128 : 16 * 2;
  // wgmma descriptors of k-step 0 (each k-step moves both by 256 bytes).
  const uint64_t q_desc = MakeSmemDescInterleave(SmemAddr(sQ), 128, (kD / 8) * 128);
  const uint64_t k_desc =
      MakeSmemDescInterleave(SmemAddr(reinterpret_cast<uint8_t*>(sK) + qk_nh * 4 * (kD / 8) * 128), 128, (kD / 8) * 128);
  // kVar 3 (swizzled): k-step ks of 16 lies in column block ks / 4, 32 (ks % 4)
  // bytes into its rows; this warpgroup's 32 tokens start 32 rows (4 KB) in.
  auto q_desc_sw = [&](int ks) {
    return MakeSmemDesc(SmemAddr(sQ) + (ks >> 2) * 8192 + 32 * (ks & 3), 16, 1024);
  };
  auto k_desc_sw = [&](int ks) {
    return MakeSmemDesc(SmemAddr(sK) + (ks >> 2) * 8192 + qk_nh * 4096 + 32 * (ks & 3), 16, 1024);
  };
  // PV (kPvWg): P is 64 rows x 64 tokens core-tiled (K-major, row groups 1024 B
  // apart); V is the KV tile read MN-major: 8 columns per 16-byte core row,
  // column groups 128 B apart (SBO), token groups 72 * 128 B apart (LBO).
  const uint64_t p_desc = MakeSmemDescInterleave(SmemAddr(sP), 128, (kTok / 8) * 128);
  const uint64_t v_desc =
      MakeSmemDescInterleave(SmemAddr(reinterpret_cast<uint8_t*>(sK) + qk_nh * 32 * 128), (kD / 8) * 128, 128);

  for (int it = 0; it < n_tiles; ++it) {
    const int64_t j0 = tok_begin + static_cast<int64_t>(it) * kTok;
    CpAsyncWait<0>();
    __syncthreads();  // raw tile landed; the previous PV is done with sK and sP
    for (int c = tid; c < kTok * (kD / 16); c += kThreads) {
      // Consecutive threads take consecutive rows: conflict-free in both layouts.
      const int r = c % kTok, col = c / kTok;
      const uint4 v = *reinterpret_cast<const uint4*>(sRaw + r * kRawStr + col * 16);
      uint4 o0, o1;
      o0.x = Fp8x2ToBf16x2<kFnuz>(v.x);
      o0.y = Fp8x2ToBf16x2<kFnuz>(v.x >> 16);
      o0.z = Fp8x2ToBf16x2<kFnuz>(v.y);
      o0.w = Fp8x2ToBf16x2<kFnuz>(v.y >> 16);
      o1.x = Fp8x2ToBf16x2<kFnuz>(v.z);
      o1.y = Fp8x2ToBf16x2<kFnuz>(v.z >> 16);
      o1.z = Fp8x2ToBf16x2<kFnuz>(v.w);
      o1.w = Fp8x2ToBf16x2<kFnuz>(v.w >> 16);
      if (kSw) {
        *reinterpret_cast<uint4*>(reinterpret_cast<uint8_t*>(sK) + Sw128(r, col * 16)) = o0;
        *reinterpret_cast<uint4*>(reinterpret_cast<uint8_t*>(sK) + Sw128(r, col * 16 + 8)) = o1;
      } else if (kWg) {
        uint8_t* base = reinterpret_cast<uint8_t*>(sK) + CoreTiled(r, col * 16);
        *reinterpret_cast<uint4*>(base) = o0;
        *reinterpret_cast<uint4*>(base + 128) = o1;
      } else {
        uint4* dst = reinterpret_cast<uint4*>(sK + r * kStr + col * 16);
        dst[0] = o0;
        dst[1] = o1;
      }
    }
    if (kWg) FenceProxyAsync();
    if (tid < kTok) sSlot[tid] = slot_next;
    __syncthreads();  // sK and the next tile's rows ready, sRaw free
    if (it + 1 < n_tiles) issue_tile();
    if (tid < kTok) slot_next = slot_of(j0 + 2 * kTok + tid);

    // S = Q K^T for m-tile qk_mi and tokens [32*qk_nh, +32).
    float s[4][4];
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] = 0.f;
    }
    if (kWg) {
      // Warpgroup qk_nh: all 64 rows x its 32 tokens; the accumulator layout
      // matches mma.sync's per 16x8 tile, so s[nt][e] = d[4 nt + e].
      float d[16];
#pragma unroll
      for (int i = 0; i < 16; ++i) d[i] = 0.f;
      WgmmaFence();
#pragma unroll
      for (int ks = 0; ks < kD / 16; ++ks) {
        if (kSw) {
          WgmmaSS<32, Bf16>(d, q_desc_sw(ks), k_desc_sw(ks), 1);
        } else {
          WgmmaSS<32, Bf16>(d, q_desc + ks * (256 >> 4), k_desc + ks * (256 >> 4), 1);
        }
      }
      WgmmaCommit();
      WgmmaWait<0>();
#pragma unroll
      for (int i = 0; i < 16; ++i) s[i >> 2][i & 3] = d[i];
    } else {
#pragma unroll 4
      for (int ks = 0; ks < kD / 16; ++ks) {
        uint32_t a0, a1, a2, a3, b0, b1, b2, b3, b4, b5, b6, b7;
        LdMatrixX4(a_base + ks * 32, a0, a1, a2, a3);
        LdMatrixX4(b_base + ks * 32, b0, b1, b2, b3);
        LdMatrixX4(b_base + 16 * kStr * 2 + ks * 32, b4, b5, b6, b7);
        MmaBf16(s[0], a0, a1, a2, a3, b0, b1);
        MmaBf16(s[1], a0, a1, a2, a3, b2, b3);
        MmaBf16(s[2], a0, a1, a2, a3, b4, b5);
        MmaBf16(s[3], a0, a1, a2, a3, b6, b7);
      }
    }
    // The same as ScoresAndTileMax (v6 calls it): kept inline here because
    // sharing it changed this kernel's machine code, not re-tested on a GPU.
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t j = j0 + qk_nh * 32 + nt * 8 + (lane & 3) * 2 + (e & 1);
        float v = s[nt][e] * p.sl2;
        if (j >= tok_end || j > lim_qk[e >> 1]) v = -INFINITY;
        s[nt][e] = v;
        mx[e >> 1] = fmaxf(mx[e >> 1], v);
      }
    }
    mx[0] = WarpMax4(mx[0]);
    mx[1] = WarpMax4(mx[1]);
    if ((lane & 3) == 0) {
      sMax[qk_nh * kRows + qk_mi * 16 + (lane >> 2)] = mx[0];
      sMax[qk_nh * kRows + qk_mi * 16 + 8 + (lane >> 2)] = mx[1];
    }
    __syncthreads();  // tile maxima of both token halves visible

    // New running max for all 8 rows this thread accumulates; every warp
    // computes the same values from the same shared data.
    float alpha[4][2], m_qk[2] = {0.f, 0.f}, alpha2[2] = {1.f, 1.f};
    if (kPvWg) {
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int row = qk_mi * 16 + hf * 8 + (lane >> 2);
        const float mn = fmaxf(m2[hf], fmaxf(sMax[row], sMax[kRows + row]));
        const float m_use = mn == -INFINITY ? 0.f : mn;
        alpha2[hf] = exp2f(m2[hf] - m_use);
        m2[hf] = mn;
        m_qk[hf] = m_use;
      }
    }
#pragma unroll
    for (int mi = 0; mi < 4 && !kPvWg; ++mi) {
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int row = mi * 16 + hf * 8 + (lane >> 2);
        const float mn = fmaxf(m_run[mi][hf], fmaxf(sMax[row], sMax[kRows + row]));
        const float m_use = mn == -INFINITY ? 0.f : mn;
        alpha[mi][hf] = exp2f(m_run[mi][hf] - m_use);
        m_run[mi][hf] = mn;
        if (mi == qk_mi) m_qk[hf] = m_use;
      }
    }
    float sum[2] = {0.f, 0.f};
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const uint32_t lo = PackBf16x2Rn(exp2f(s[nt][0] - m_qk[0]), exp2f(s[nt][1] - m_qk[0]));
      const uint32_t hi = PackBf16x2Rn(exp2f(s[nt][2] - m_qk[1]), exp2f(s[nt][3] - m_qk[1]));
      // The sum counts the rounded probabilities that PV multiplies.
      sum[0] += Bf16LoToFloat(lo) + Bf16HiToFloat(lo);
      sum[1] += Bf16LoToFloat(hi) + Bf16HiToFloat(hi);
      const int col = qk_nh * 32 + nt * 8 + (lane & 3) * 2;
      if (kSw) {
        const int row = qk_mi * 16 + (lane >> 2);
        *reinterpret_cast<uint32_t*>(reinterpret_cast<uint8_t*>(sP) + Sw128(row, col)) = lo;
        *reinterpret_cast<uint32_t*>(reinterpret_cast<uint8_t*>(sP) + Sw128(row + 8, col)) = hi;
      } else if (kPvWg) {
        const int row = qk_mi * 16 + (lane >> 2);
        uint8_t* base = reinterpret_cast<uint8_t*>(sP) + ((row >> 3) * (kTok / 8) + (col >> 3)) * 128 + (col & 7) * 2;
        *reinterpret_cast<uint32_t*>(base + (row & 7) * 16) = lo;
        *reinterpret_cast<uint32_t*>(base + (kTok / 8) * 128 + (row & 7) * 16) = hi;  // row + 8
      } else {
        *reinterpret_cast<uint32_t*>(sP + (qk_mi * 16 + (lane >> 2)) * kPStr + col) = lo;
        *reinterpret_cast<uint32_t*>(sP + (qk_mi * 16 + 8 + (lane >> 2)) * kPStr + col) = hi;
      }
    }
    if (kPvWg) FenceProxyAsync();
    sum[0] = WarpSum4(sum[0]);
    sum[1] = WarpSum4(sum[1]);
    if ((lane & 3) == 0) {
      sSum[qk_nh * kRows + qk_mi * 16 + (lane >> 2)] = sum[0];
      sSum[qk_nh * kRows + qk_mi * 16 + 8 + (lane >> 2)] = sum[1];
    }
    __syncthreads();  // P and the partial sums visible

    if constexpr (kPvWg) {
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int row = qk_mi * 16 + hf * 8 + (lane >> 2);
        l2[hf] = l2[hf] * alpha2[hf] + (sSum[row] + sSum[kRows + row]);
      }
#pragma unroll
      for (int i = 0; i < 128; ++i) accw[i] *= alpha2[(i >> 1) & 1];
      WgmmaFence();
#pragma unroll
      for (int ks = 0; ks < kTok / 16; ++ks) {
        if (kSw) {
          // P: one 64-token column block, k-step 32 bytes along its rows. V:
          // MN-major, this warpgroup's 4 column blocks 8 KB apart (lbo),
          // 8-token groups 1024 bytes apart (sbo), 16 tokens per k-step.
          WgmmaSS<256, Bf16, true>(*reinterpret_cast<float(*)[128]>(accw),
                                    MakeSmemDesc(SmemAddr(sP) + 32 * ks, 16, 1024),
                                    MakeSmemDesc(SmemAddr(sK) + qk_nh * 4 * 8192 + ks * 2048, 8192, 1024), 1);
        } else {
          WgmmaSS<256, Bf16, true>(*reinterpret_cast<float(*)[128]>(accw), p_desc + ks * (256 >> 4),
                                    v_desc + ks * ((2 * (kD / 8) * 128) >> 4), 1);
        }
      }
      WgmmaCommit();
      WgmmaWait<0>();
    } else {
#pragma unroll
    for (int mi = 0; mi < 4; ++mi) {
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int row = mi * 16 + hf * 8 + (lane >> 2);
        l_run[mi][hf] = l_run[mi][hf] * alpha[mi][hf] + (sSum[row] + sSum[kRows + row]);
      }
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mi][nt][e] *= alpha[mi][e >> 1];
      }
    }

    // O[:, 64*warp .. +64] += P V.
#pragma unroll
    for (int ks = 0; ks < kTok / 16; ++ks) {
      uint32_t a[4][4];
#pragma unroll
      for (int mi = 0; mi < 4; ++mi) {
        LdMatrixX4(p_base + (mi * 16 * kPStr + ks * 16) * 2, a[mi][0], a[mi][1], a[mi][2], a[mi][3]);
      }
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        uint32_t b0, b1, b2, b3;
        LdMatrixX4Trans(v_base + ks * v_ks + q * v_q, b0, b1, b2, b3);
#pragma unroll
        for (int mi = 0; mi < 4; ++mi) {
          MmaBf16(acc[mi][2 * q], a[mi][0], a[mi][1], a[mi][2], a[mi][3], b0, b1);
          MmaBf16(acc[mi][2 * q + 1], a[mi][0], a[mi][1], a[mi][2], a[mi][3], b2, b3);
        }
      }
    }
    }  // mma.sync PV
  }

  // Epilogue.
  if constexpr (kPvWg) {
    WriteRows(p, *reinterpret_cast<const float(*)[128]>(accw), l2, m2, b, group, split, row0, nrows, ql, qk_mi,
              qk_nh, lane);
  } else {
#pragma unroll
  for (int mi = 0; mi < 4; ++mi) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int row = mi * 16 + hf * 8 + (lane >> 2);
      if (row >= nrows) continue;
      const int r = row0 + row;
      const int col0 = warp * 64 + (lane & 3) * 2;
      if (p.splits == 1) {
        uint16_t* o = p.out + (static_cast<int64_t>(b) * p.rows + r) * kDL + col0;
        const bool live = r / p.heads < ql;
        const float inv = p.out_scale / l_run[mi][hf];
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          const uint32_t v = live ? PackBf16x2(acc[mi][nt][2 * hf] * inv, acc[mi][nt][2 * hf + 1] * inv,
                                               p.rounding)
                                  : 0u;
          *reinterpret_cast<uint32_t*>(o + nt * 8) = v;
        }
      } else {
        const int64_t pi =
            ((static_cast<int64_t>(b) * p.row_groups + group) * p.splits + split) * kRows + row;
        float* o = p.part_o + pi * kDL + col0;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          *reinterpret_cast<float2*>(o + nt * 8) = make_float2(acc[mi][nt][2 * hf], acc[mi][nt][2 * hf + 1]);
        }
        if (warp == 0 && (lane & 3) == 0) {
          p.part_ml[pi * 2] = m_run[mi][hf];
          p.part_ml[pi * 2 + 1] = l_run[mi][hf];
        }
      }
    }
  }
  }  // mma.sync epilogue
}

}  // namespace

KernelFn V4Kernel(bool fnuz, int var) {
  switch (var) {
    case 0:
      return fnuz ? MlaDecodeKernel<true, 0> : MlaDecodeKernel<false, 0>;
    case 1:
      return fnuz ? MlaDecodeKernel<true, 1> : MlaDecodeKernel<false, 1>;
    case 3:
      return fnuz ? MlaDecodeKernel<true, 3> : MlaDecodeKernel<false, 3>;
    default:
      return fnuz ? MlaDecodeKernel<true, 2> : MlaDecodeKernel<false, 2>;
  }
}

}  // namespace cuda_mla
}  // namespace kernelserve
