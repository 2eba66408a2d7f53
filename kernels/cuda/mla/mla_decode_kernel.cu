// MLA absorbed decode (a16w8) for sm_90: bf16 queries against fp8 KV rows of
// 576 (latent 512 + rope 64), one row being both K (576) and V (first 512).
//
// One CTA = (KV split, group of 64 query rows, request). The 64 rows are the
// flattened (draft position, head) pairs of one request, so every head of a
// group shares each KV tile, read from memory once per group. Per 64-token
// tile: cp.async of the raw fp8 rows, one unpack to bf16 in shared memory,
// QK^T and PV on the tensor cores (mma.sync m16n8k16 bf16, fp32 accumulate),
// and an online softmax in base 2. With several splits, the unnormalized
// partial outputs and their (max, sum) go to a workspace and a merge kernel
// combines them in split order: the result does not depend on scheduling.
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/attention/sm90/pipeline_sm90.h"
#include "kernels/cuda/mla/device_common.cuh"
#include "kernels/cuda/mla/mla_decode_launch.h"

namespace kernelserve {
namespace cuda_mla {
namespace {

using ::kernelserve::cuda::sm90::NamedBarrierArrive;
using ::kernelserve::cuda::sm90::NamedBarrierSync;
using ::kernelserve::cuda::sm90::WarpUniform;

using namespace ::kernelserve::cuda_detail;  // NOLINT: device helpers

constexpr int kRows = 64;     // query rows per CTA
constexpr int kTok = 64;      // KV tokens per tile
constexpr int kThreads = 256;  // 8 warps
constexpr int kD = 576;
constexpr int kDL = 512;
constexpr int kDR = 64;
constexpr int kStr = kD + 8;  // bf16 row stride of sQ / sK: 1168 B, conflict-free ldmatrix
constexpr int kPStr = kTok + 8;
constexpr int kSmemQ = kRows * kStr * 2;
constexpr int kSmemK = kTok * kStr * 2;
constexpr int kRawStr = kD + 16;  // conflict-free 16-byte reads down a column of rows
constexpr int kSmemRaw = kTok * kRawStr;
constexpr int kSmemP = kRows * kPStr * 2;
constexpr int kSmemStats = 4 * kRows * 4;
constexpr int kSmemSlots = kTok * 8;
constexpr int kSmemBytes = kSmemQ + kSmemK + kSmemRaw + kSmemP + kSmemStats + kSmemSlots;
// kVar 3 aligns its base to 1024 bytes (the 128-byte swizzle's atoms); the
// offsets of sK, sRaw and sP are multiples of 1024 already.
constexpr int kSmemBytesSw = kSmemBytes + 1024;
static_assert(kSmemQ % 1024 == 0 && (kSmemQ + kSmemK) % 1024 == 0 &&
                  (kSmemQ + kSmemK + kSmemRaw) % 1024 == 0,
              "swizzled tiles need 1024-byte alignment");

struct KParams {
  const uint16_t* q_lat;
  const uint16_t* q_pe;
  const uint8_t* kv;
  uint16_t* out;
  float* part_o;   // [B][G][splits][64][512]
  float* part_ml;  // [B][G][splits][64][2]
  const int32_t* seq_lens;
  const int32_t* kv_indices;
  const int32_t* kv_indptr;
  const int32_t* q_lens;
  int q_len, heads, rows, row_groups, splits, page_size, paged, rounding;
  int64_t chunk, kv_seq;
  float sl2;        // softmax scale * kv_scale * log2(e)
  float out_scale;  // kv_scale
};

__device__ __forceinline__ float WarpMax4(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float WarpSum4(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

template <bool kFnuz>
__device__ __forceinline__ uint32_t Fp8x2ToBf16x2(uint32_t v) {
  return kFnuz ? E4m3fnuzX2ToBf16x2(v) : E4m3fnX2ToBf16x2(v);
}

// Byte offset of (row, k) in a K-major, no-swizzle wgmma tile of 576 columns:
// 8x8 core matrices of 128 contiguous bytes, K-direction neighbours 128 B
// apart, row-group neighbours 72 * 128 B apart.
__device__ __forceinline__ int CoreTiled(int row, int k) {
  return ((row >> 3) * (kD / 8) + (k >> 3)) * 128 + (row & 7) * 16 + (k & 7) * 2;
}

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
// The epilogue of the 256-thread wgmma kernels (v4's): warp `wq` of
// warpgroup `half` holds rows [16 wq, +16) of output columns [256 half, +256)
// in the m64n256 accumulator layout. One split: O / l, rounded to bf16 (rows
// past a request's window are zeros); several: the fp32 partials and (half 0)
// the row's max and sum for MlaMergeKernel.
__device__ __forceinline__ void WriteRows(const KParams& p, const float (&acc)[128], const float (&l2)[2],
                                          const float (&m2)[2], int b, int group, int split, int row0, int nrows,
                                          int ql, int wq, int half, int lane) {
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int row = wq * 16 + hf * 8 + (lane >> 2);
    if (row >= nrows) continue;
    const int r = row0 + row;
    const int col0 = half * 256 + (lane & 3) * 2;
    if (p.splits == 1) {
      uint16_t* o = p.out + (static_cast<int64_t>(b) * p.rows + r) * kDL + col0;
      const bool live = r / p.heads < ql;
      const float inv = p.out_scale / l2[hf];
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        const uint32_t v = live ? PackBf16x2(acc[4 * j + 2 * hf] * inv, acc[4 * j + 2 * hf + 1] * inv, p.rounding)
                                : 0u;
        *reinterpret_cast<uint32_t*>(o + j * 8) = v;
      }
    } else {
      const int64_t pi = ((static_cast<int64_t>(b) * p.row_groups + group) * p.splits + split) * kRows + row;
      float* o = p.part_o + pi * kDL + col0;
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        *reinterpret_cast<float2*>(o + j * 8) = make_float2(acc[4 * j + 2 * hf], acc[4 * j + 2 * hf + 1]);
      }
      if (half == 0 && (lane & 3) == 0) {
        p.part_ml[pi * 2] = m2[hf];
        p.part_ml[pi * 2 + 1] = l2[hf];
      }
    }
  }
}

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

  const int split = blockIdx.x, group = blockIdx.y, b = blockIdx.z;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int64_t seq = p.seq_lens ? p.seq_lens[b] : p.kv_seq;
  const int ql = p.q_lens ? p.q_lens[b] : p.q_len;
  const int64_t tok_begin = static_cast<int64_t>(split) * p.chunk;
  const int64_t tok_end = min(seq, tok_begin + p.chunk);
  const int n_tiles = tok_end > tok_begin ? static_cast<int>((tok_end - tok_begin + kTok - 1) / kTok) : 0;
  const int row0 = group * kRows;
  const int nrows = min(kRows, p.rows - row0);
  const int kv_base = p.paged ? p.kv_indptr[b] : 0;

  // Pool row of token j, or -1 past this split's chunk.
  auto slot_of = [&](int64_t j) -> int64_t {
    if (j >= tok_end) return -1;
    if (!p.paged) return static_cast<int64_t>(b) * p.kv_seq + j;
    if (p.page_size == 1) return p.kv_indices[kv_base + j];
    return static_cast<int64_t>(p.kv_indices[kv_base + j / p.page_size]) * p.page_size + j % p.page_size;
  };
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
    if (kWg) FenceProxyAsyncShared();
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
  const uint64_t q_desc = WgmmaDesc(SmemAddr(sQ), 128, (kD / 8) * 128);
  const uint64_t k_desc =
      WgmmaDesc(SmemAddr(reinterpret_cast<uint8_t*>(sK) + qk_nh * 4 * (kD / 8) * 128), 128, (kD / 8) * 128);
  // kVar 3 (swizzled): k-step ks of 16 lies in column block ks / 4, 32 (ks % 4)
  // bytes into its rows; this warpgroup's 32 tokens start 32 rows (4 KB) in.
  auto q_desc_sw = [&](int ks) {
    return WgmmaDescSw128(SmemAddr(sQ) + (ks >> 2) * 8192 + 32 * (ks & 3), 16, 1024);
  };
  auto k_desc_sw = [&](int ks) {
    return WgmmaDescSw128(SmemAddr(sK) + (ks >> 2) * 8192 + qk_nh * 4096 + 32 * (ks & 3), 16, 1024);
  };
  // PV (kPvWg): P is 64 rows x 64 tokens core-tiled (K-major, row groups 1024 B
  // apart); V is the KV tile read MN-major: 8 columns per 16-byte core row,
  // column groups 128 B apart (SBO), token groups 72 * 128 B apart (LBO).
  const uint64_t p_desc = WgmmaDesc(SmemAddr(sP), 128, (kTok / 8) * 128);
  const uint64_t v_desc =
      WgmmaDesc(SmemAddr(reinterpret_cast<uint8_t*>(sK) + qk_nh * 32 * 128), (kD / 8) * 128, 128);

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
    if (kWg) FenceProxyAsyncShared();
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
          WgmmaM64N32K16Bf16(d, q_desc_sw(ks), k_desc_sw(ks), 1);
        } else {
          WgmmaM64N32K16Bf16(d, q_desc + ks * (256 >> 4), k_desc + ks * (256 >> 4), 1);
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
        Ldmatrix4(a_base + ks * 32, a0, a1, a2, a3);
        Ldmatrix4(b_base + ks * 32, b0, b1, b2, b3);
        Ldmatrix4(b_base + 16 * kStr * 2 + ks * 32, b4, b5, b6, b7);
        MmaBf16(s[0], a0, a1, a2, a3, b0, b1);
        MmaBf16(s[1], a0, a1, a2, a3, b2, b3);
        MmaBf16(s[2], a0, a1, a2, a3, b4, b5);
        MmaBf16(s[3], a0, a1, a2, a3, b6, b7);
      }
    }
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
    if (kPvWg) FenceProxyAsyncShared();
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
          WgmmaM64N256K16Bf16TransB(*reinterpret_cast<float(*)[128]>(accw),
                                    WgmmaDescSw128(SmemAddr(sP) + 32 * ks, 16, 1024),
                                    WgmmaDescSw128(SmemAddr(sK) + qk_nh * 4 * 8192 + ks * 2048, 8192, 1024), 1);
        } else {
          WgmmaM64N256K16Bf16TransB(*reinterpret_cast<float(*)[128]>(accw), p_desc + ks * (256 >> 4),
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
        Ldmatrix4(p_base + (mi * 16 * kPStr + ks * 16) * 2, a[mi][0], a[mi][1], a[mi][2], a[mi][3]);
      }
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        uint32_t b0, b1, b2, b3;
        Ldmatrix4Trans(v_base + ks * v_ks + q * v_q, b0, b1, b2, b3);
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

// ------------------------------------------------------------- kWgmmaPipe
// v4 (kVar 2) with the fp8 unpack taken off the critical path. Same CTA, same
// 64-token tiles and the same wgmma sequence, softmax and epilogue, so the
// output bits equal v4's; what changes is the schedule:
// - two bf16 KV tiles (double buffer) instead of one, and no raw fp8 stage in
//   shared memory (no room: Q + 2 tiles = 216 KB): each thread loads its 9
//   16-byte chunks of tile i+2 straight into registers while tile i is
//   processed, so the loads have a whole tile of time to land;
// - the unpack of tile i+1 into the other buffer runs while QK^T(i) is in
//   flight on the tensor cores (issue, wgmma.wait_group 1, unpack, wait 0);
// - each warpgroup unpacks exactly the latent columns its own PV reads
//   ([256 g, +256)) plus half of the rope columns (read by no PV), so the only
//   reader still using that buffer is its own PV(i-1), which wait_group 1
//   retires: no CTA barrier guards the buffer;
// - 2 CTA barriers per tile (v4: 4): the max exchange and the P exchange of
//   the two token halves, which also publish the unpacked tile and free sP;
// - the rescale of the 128 PV accumulators is skipped where alpha is exactly
//   1 (x * 1 == x, so no bit changes).
constexpr int kPipeTile = kTok * kD * 2;  // one bf16 KV tile, core-tiled: 72 KB
constexpr int kPipeQ = kRows * kD * 2;    // Q, core-tiled: 72 KB
constexpr int kPipeP = kRows * kTok * 2;  // P, core-tiled: 8 KB
constexpr int kSmemBytesPipe = kPipeQ + 2 * kPipeTile + kPipeP + kSmemStats + 2 * kSmemSlots;
static_assert(kSmemBytesPipe <= 227 * 1024, "kWgmmaPipe must fit the sm_90 per-block limit");
// Raw 16-byte chunks per thread per tile: 8 latent (8 rows x 1) + 1 rope.
constexpr int kPipeChunks = kTok * (kD / 16) / kThreads;
static_assert(kPipeChunks == 9, "chunk map below assumes 9 chunks per thread");

// 16 bytes from global memory that are read once (no L1 allocation), or zeros
// where `pred` is false (tokens past the chunk, like v4's zero-filled cp.async).
__device__ __forceinline__ uint4 LdgStreamOrZero(const void* src, bool pred) {
  uint4 v;
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %5, 0;\n"
      "mov.b32 %0, 0;\nmov.b32 %1, 0;\nmov.b32 %2, 0;\nmov.b32 %3, 0;\n"
      "@p ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n}\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(src), "r"(static_cast<int>(pred)));
  return v;
}

// Two e4m3fn codes (low two bytes of v) -> bf16x2 with one conversion
// instruction instead of two: e4m3 -> f16 is exact, f16 -> f32 is exact, and
// the f32 has only 3 mantissa bits, so its upper half is the bf16 value that
// v4's cvt.rn.bf16x2.f32 produces, for every finite code. NaN codes stay NaN
// (v4's becomes the canonical NaN; either way the output rounds to 0x7FFF).
__device__ __forceinline__ uint32_t E4m3fnX2ToBf16x2Trunc(uint32_t v) {
  float lo, hi;
  E4m3fnX2ToF32x2(v, lo, hi);
  return __byte_perm(__float_as_uint(lo), __float_as_uint(hi), 0x7632);
}

template <bool kFnuz>
__device__ __forceinline__ uint32_t Fp8x2ToBf16x2Pipe(uint32_t v) {
  return kFnuz ? E4m3fnuzX2ToBf16x2(v) : E4m3fnX2ToBf16x2Trunc(v);
}

// 16 fp8 codes of one row -> 16 bf16 at `dst` (a core-tiled 8-column pair:
// the second 8 columns sit 128 bytes on).
template <bool kFnuz>
__device__ __forceinline__ void UnpackChunk(uint8_t* dst, const uint4 v) {
  uint4 o0, o1;
  o0.x = Fp8x2ToBf16x2Pipe<kFnuz>(v.x);
  o0.y = Fp8x2ToBf16x2Pipe<kFnuz>(v.x >> 16);
  o0.z = Fp8x2ToBf16x2Pipe<kFnuz>(v.y);
  o0.w = Fp8x2ToBf16x2Pipe<kFnuz>(v.y >> 16);
  o1.x = Fp8x2ToBf16x2Pipe<kFnuz>(v.z);
  o1.y = Fp8x2ToBf16x2Pipe<kFnuz>(v.z >> 16);
  o1.z = Fp8x2ToBf16x2Pipe<kFnuz>(v.w);
  o1.w = Fp8x2ToBf16x2Pipe<kFnuz>(v.w >> 16);
  *reinterpret_cast<uint4*>(dst) = o0;
  *reinterpret_cast<uint4*>(dst + 128) = o1;
}

// Pins a register written by an async wgmma at this point of the program, so
// the compiler neither reads it before the wait nor moves the wait past a use.
__device__ __forceinline__ void FenceOperand(float& r) { asm volatile("" : "+f"(r)::"memory"); }

template <bool kFnuz>
__global__ void __launch_bounds__(kThreads, 1) MlaDecodePipeKernel(const KParams p) {
  extern __shared__ __align__(16) uint8_t smem_raw[];
  uint8_t* sQ = smem_raw;
  uint8_t* sK0 = sQ + kPipeQ;  // KV tile buffers 0 and 1
  uint8_t* sP = sK0 + 2 * kPipeTile;
  float* sMax = reinterpret_cast<float*>(sP + kPipeP);  // [2][64]
  float* sSum = sMax + 2 * kRows;                       // [2][64]
  int64_t* sSlot = reinterpret_cast<int64_t*>(sSum + 2 * kRows);  // [2][64]: tile t's rows in [t & 1]

  const int split = blockIdx.x, group = blockIdx.y, b = blockIdx.z;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int64_t seq = p.seq_lens ? p.seq_lens[b] : p.kv_seq;
  const int ql = p.q_lens ? p.q_lens[b] : p.q_len;
  const int64_t tok_begin = static_cast<int64_t>(split) * p.chunk;
  const int64_t tok_end = min(seq, tok_begin + p.chunk);
  const int n_tiles = tok_end > tok_begin ? static_cast<int>((tok_end - tok_begin + kTok - 1) / kTok) : 0;
  const int row0 = group * kRows;
  const int nrows = min(kRows, p.rows - row0);
  const int kv_base = p.paged ? p.kv_indptr[b] : 0;
  const int qk_mi = warp & 3, qk_nh = warp >> 2;  // warp in its warpgroup; warpgroup

  auto slot_of = [&](int64_t j) -> int64_t {
    if (j >= tok_end) return -1;
    if (!p.paged) return static_cast<int64_t>(b) * p.kv_seq + j;
    if (p.page_size == 1) return p.kv_indices[kv_base + j];
    return static_cast<int64_t>(p.kv_indices[kv_base + j / p.page_size]) * p.page_size + j % p.page_size;
  };

  // This thread's chunks of a tile. Latent: rows 8 k + (lane & 7), k = 0..7,
  // columns [256 g + 64 w + 16 (lane >> 3), +16): a quarter-warp covers 8
  // consecutive rows of one chunk (conflict-free core-tiled stores), a warp
  // 64 contiguous bytes of each of 8 rows. Rope: row 16 w + (lane & 15),
  // columns [512 + 32 g + 16 (lane >> 4), +16).
  const int lat_row = lane & 7;
  const int lat_col = qk_nh * 256 + qk_mi * 64 + (lane >> 3) * 16;
  const int rope_row = qk_mi * 16 + (lane & 15);
  const int rope_col = kDL + qk_nh * 32 + (lane >> 4) * 16;
  const int lat_off = CoreTiled(lat_row, lat_col);  // row 8 k + lat_row: + k row groups
  const int rope_off = CoreTiled(rope_row, rope_col);
  constexpr int kRowGroupBytes = (kD / 8) * 128;
  uint4 raw[kPipeChunks];
  auto load_tile = [&](const int64_t* slots) {
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const int64_t slot = slots[8 * k + lat_row];
      raw[k] = LdgStreamOrZero(p.kv + (slot >= 0 ? slot : 0) * kD + lat_col, slot >= 0);
    }
    const int64_t slot = slots[rope_row];
    raw[8] = LdgStreamOrZero(p.kv + (slot >= 0 ? slot : 0) * kD + rope_col, slot >= 0);
  };

  // Prologue: tile 0 unpacked into buffer 0, tile 1 in registers, the rows of
  // tile 2 in sSlot[0] and those of tile 3 in slot_next.
  if (tid < kTok) {
    sSlot[tid] = slot_of(tok_begin + tid);
    sSlot[kTok + tid] = slot_of(tok_begin + kTok + tid);
  }
  __syncthreads();
  if (n_tiles > 0) load_tile(sSlot);
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
      *reinterpret_cast<uint4*>(sQ + CoreTiled(r, col * 8)) = v;
    }
  }
  if (n_tiles > 0) {
#pragma unroll
    for (int k = 0; k < 8; ++k) UnpackChunk<kFnuz>(sK0 + lat_off + k * kRowGroupBytes, raw[k]);
    UnpackChunk<kFnuz>(sK0 + rope_off, raw[8]);
  }
  if (n_tiles > 1) load_tile(sSlot + kTok);
  FenceProxyAsyncShared();
  __syncthreads();  // sQ and tile 0 visible; sSlot read
  int64_t slot_next = -1;
  if (tid < kTok) {
    sSlot[tid] = slot_of(tok_begin + 2 * kTok + tid);
    slot_next = slot_of(tok_begin + 3 * kTok + tid);
  }
  __syncthreads();  // rows of tile 2 visible

  int64_t lim_qk[2];  // last visible token of the QK rows; -1: row masked
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int row = qk_mi * 16 + hf * 8 + (lane >> 2);
    const int t = (row0 + row) / p.heads;
    lim_qk[hf] = (row < nrows && t < ql) ? seq - ql + t : -1;
  }
  float acc[128];  // the m64n256 PV accumulator of this warpgroup's 256 columns
#pragma unroll
  for (int i = 0; i < 128; ++i) acc[i] = 0.f;
  float m2[2] = {-INFINITY, -INFINITY}, l2[2] = {0.f, 0.f};

  // Descriptors of k-step 0 in buffer 0; buffer 1 is kPipeTile bytes on, each
  // k-step moves them as in v4.
  constexpr uint64_t kTileDesc = kPipeTile >> 4;
  const uint64_t q_desc = WgmmaDesc(SmemAddr(sQ), 128, kRowGroupBytes);
  const uint64_t k_desc0 = WgmmaDesc(SmemAddr(sK0 + qk_nh * 4 * kRowGroupBytes), 128, kRowGroupBytes);
  const uint64_t p_desc = WgmmaDesc(SmemAddr(sP), 128, (kTok / 8) * 128);
  const uint64_t v_desc0 = WgmmaDesc(SmemAddr(sK0 + qk_nh * 32 * 128), kRowGroupBytes, 128);

  // Iteration i issues PV(i-1) and QK^T(i) back to back and retires both before
  // its end: with a wgmma group still in flight across the loop's back edge,
  // ptxas serializes every wgmma of the kernel (C7514), hence the rotation.
  for (int it = 0; it < n_tiles; ++it) {
    const int64_t j0 = tok_begin + static_cast<int64_t>(it) * kTok;
    const int cur = it & 1;
    uint8_t* k_next = sK0 + (cur ^ 1) * kPipeTile;

    // O += P(i-1) V(i-1), async (tile i-1 is in the other buffer).
    if (it > 0) {
      WgmmaFence();
#pragma unroll
      for (int ks = 0; ks < kTok / 16; ++ks) {
        WgmmaM64N256K16Bf16TransB(acc, p_desc + ks * (256 >> 4),
                                  v_desc0 + (cur ^ 1) * kTileDesc + ks * ((2 * kRowGroupBytes) >> 4), 1);
      }
      WgmmaCommit();
    }
    // S = Q K^T(i) for this warpgroup's 32 tokens, async.
    float d[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) d[i] = 0.f;
    WgmmaFence();
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      WgmmaM64N32K16Bf16(d, q_desc + ks * (256 >> 4), k_desc0 + cur * kTileDesc + ks * (256 >> 4), 1);
    }
    WgmmaCommit();

    // Under PV(i-1): the slot table and tile i+1's rope columns (last read by
    // QK^T(i-1), done before the previous max barrier; no PV reads them).
    if (tid < kTok) {
      sSlot[(cur ^ 1) * kTok + tid] = slot_next;  // tile i+3, read in iteration i+1
      slot_next = slot_of(j0 + 4 * kTok + tid);
    }
    const bool unpack_next = it + 1 < n_tiles;
    if (unpack_next) UnpackChunk<kFnuz>(k_next + rope_off, raw[8]);
    // Under QK^T(i): tile i+1's latent columns [256 g, +256), read only by
    // this warpgroup's PV(i-1), which wait_group 1 retires.
    WgmmaWait<1>();
    if (unpack_next) {
#pragma unroll
      for (int k = 0; k < 8; ++k) UnpackChunk<kFnuz>(k_next + lat_off + k * kRowGroupBytes, raw[k]);
      FenceProxyAsyncShared();
    }
    // Tile i+2's rows were published by the barriers of tile i-1.
    if (it + 2 < n_tiles) load_tile(sSlot + cur * kTok);
    WgmmaWait<0>();
#pragma unroll
    for (int i = 0; i < 16; ++i) FenceOperand(d[i]);

    // From here to the rescale: v4's softmax, expression for expression.
    float s[4][4];
#pragma unroll
    for (int i = 0; i < 16; ++i) s[i >> 2][i & 3] = d[i];
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
    // Barrier A: both halves' maxima; tile i+1 complete in k_next; both
    // warpgroups' PV(i-1) done, so sP may be rewritten.
    __syncthreads();

    float m_qk[2] = {0.f, 0.f}, alpha2[2] = {1.f, 1.f};
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int row = qk_mi * 16 + hf * 8 + (lane >> 2);
      const float mn = fmaxf(m2[hf], fmaxf(sMax[row], sMax[kRows + row]));
      const float m_use = mn == -INFINITY ? 0.f : mn;
      alpha2[hf] = exp2f(m2[hf] - m_use);
      m2[hf] = mn;
      m_qk[hf] = m_use;
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
      const int row = qk_mi * 16 + (lane >> 2);
      uint8_t* base = sP + ((row >> 3) * (kTok / 8) + (col >> 3)) * 128 + (col & 7) * 2;
      *reinterpret_cast<uint32_t*>(base + (row & 7) * 16) = lo;
      *reinterpret_cast<uint32_t*>(base + (kTok / 8) * 128 + (row & 7) * 16) = hi;  // row + 8
    }
    FenceProxyAsyncShared();
    sum[0] = WarpSum4(sum[0]);
    sum[1] = WarpSum4(sum[1]);
    if ((lane & 3) == 0) {
      sSum[qk_nh * kRows + qk_mi * 16 + (lane >> 2)] = sum[0];
      sSum[qk_nh * kRows + qk_mi * 16 + 8 + (lane >> 2)] = sum[1];
    }
    __syncthreads();  // barrier B: P and the partial sums visible

#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int row = qk_mi * 16 + hf * 8 + (lane >> 2);
      l2[hf] = l2[hf] * alpha2[hf] + (sSum[row] + sSum[kRows + row]);
    }
    if (alpha2[0] != 1.f || alpha2[1] != 1.f) {
#pragma unroll
      for (int i = 0; i < 128; ++i) acc[i] *= alpha2[(i >> 1) & 1];
    }
  }
  if (n_tiles > 0) {
    WgmmaFence();
#pragma unroll
    for (int ks = 0; ks < kTok / 16; ++ks) {
      WgmmaM64N256K16Bf16TransB(acc, p_desc + ks * (256 >> 4),
                                v_desc0 + ((n_tiles - 1) & 1) * kTileDesc + ks * ((2 * kRowGroupBytes) >> 4), 1);
    }
    WgmmaCommit();
    WgmmaWait<0>();
  }
#pragma unroll
  for (int i = 0; i < 128; ++i) FenceOperand(acc[i]);

  WriteRows(p, acc, l2, m2, b, group, split, row0, nrows, ql, qk_mi, qk_nh, lane);
}

// ------------------------------------------------------------ kWgmmaRoles
// v7 (bench/NOTES.md, 2026-12-02): the two warpgroups take different roles
// instead of running the same phases in lockstep behind CTA barriers.
// - Warpgroup 0: S = Q K^T for the whole 64-token tile on m64n64 (Q read from
//   shared memory once per tile, not once per warpgroup; N = 64 halves the
//   operand bytes per FLOP of v4's m64n32), the softmax (a row's 64 scores sit
//   in 4 lanes of one warp: the max needs no exchange), P, and PV for the
//   output columns [0, 256). It unpacks kC0 of the 18 chunks per thread of
//   the next tile while its own QK^T runs.
// - Warpgroup 1: loads and unpacks the other 18 - kC0 chunks per thread of
//   the next tile, keeps the slot tables, and does PV for [256, 512).
// Four named barriers hand the buffers over (KREADY: tile t+1 unpacked;
// KFREE: warpgroup 0 done with the buffer tile t+1 goes into; PREADY: P(t)
// and its rescale factors written; PFREE: warpgroup 1's PV(t) retired); no
// CTA barrier in the loop. Shared memory as kWgmmaPipe: Q, two bf16 KV tiles,
// one P, plus the factors, row sums and three slot tables.
// The row sums are kept per lane and reduced once at the end, so the bits
// differ from v4's (tests compare against the oracle).
// Chunks per thread that warpgroup 0 unpacks (of 18). On the H200
// (2026-12-02, (8, 65536) paged) 6 -> 236-238 us, 8 -> 238, 5 -> 255 (spills),
// 7 -> 263 and 9 -> 300 (their 14 / 18 chunks per row break the warps'
// 64-byte reads across rows); everything on warpgroup 1 (0) -> 454.
constexpr int kRolesC0 = 6;
constexpr int kBarKReady = 1, kBarKFree = 2, kBarPReady = 3, kBarPFree = 4;
constexpr int kSmemBytesRoles = kPipeQ + 2 * kPipeTile + kPipeP + 3 * kRows * 4 + 3 * kTok * 8;
static_assert(kSmemBytesRoles <= 227 * 1024, "kWgmmaRoles must fit the sm_90 per-block limit");
constexpr int kRolesUnits = kTok / 8 * (kD / 16);  // 8-row x 16-byte units per tile: 288
static_assert(kRolesUnits == 16 * 18, "16 quarter-warp slots per warpgroup, 18 units each");

template <bool kFnuz, int kC0>
__global__ void __launch_bounds__(kThreads, 1) MlaDecodeRolesKernel(const KParams p) {
  constexpr int kC1 = 18 - kC0;
  constexpr int kN0 = 2 * kC0, kN1 = 36 - kN0;  // chunks per raw row of each warpgroup
  static_assert(kN0 >= 4 && kN0 - 4 <= 16, "warpgroup 0 holds the rope and latent chunks < 16 only");
  extern __shared__ __align__(16) uint8_t smem_raw[];
  uint8_t* sQ = smem_raw;
  uint8_t* sK0 = sQ + kPipeQ;  // KV tile buffers 0 and 1
  uint8_t* sP = sK0 + 2 * kPipeTile;
  float* sAlpha = reinterpret_cast<float*>(sP + kPipeP);  // [64] rescale of tile t
  float* sL = sAlpha + kRows;                             // [64] row sums (end)
  float* sM = sL + kRows;                                 // [64] row maxima (end)
  int64_t* sSlot = reinterpret_cast<int64_t*>(sM + kRows);  // [3][64]: tile t's rows in [t % 3]

  const int split = blockIdx.x, group = blockIdx.y, b = blockIdx.z;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  // The role from a shfl-broadcast warpgroup index, which ptxas knows to be
  // uniform: wgmma in a branch on it is not serialized (C7520).
  const int wg = WarpUniform(warp >> 2), wq = warp & 3;
  const int64_t seq = p.seq_lens ? p.seq_lens[b] : p.kv_seq;
  const int ql = p.q_lens ? p.q_lens[b] : p.q_len;
  const int64_t tok_begin = static_cast<int64_t>(split) * p.chunk;
  const int64_t tok_end = min(seq, tok_begin + p.chunk);
  const int n_tiles = tok_end > tok_begin ? static_cast<int>((tok_end - tok_begin + kTok - 1) / kTok) : 0;
  const int row0 = group * kRows;
  const int nrows = min(kRows, p.rows - row0);
  const int kv_base = p.paged ? p.kv_indptr[b] : 0;

  auto slot_of = [&](int64_t j) -> int64_t {
    if (j >= tok_end) return -1;
    if (!p.paged) return static_cast<int64_t>(b) * p.kv_seq + j;
    if (p.page_size == 1) return p.kv_indices[kv_base + j];
    return static_cast<int64_t>(p.kv_indices[kv_base + j / p.page_size]) * p.page_size + j % p.page_size;
  };

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
      UnpackChunk<kFnuz>(buf + CoreTiled(8 * k + row_in, 16 * cc), raw[j]);
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
      *reinterpret_cast<uint4*>(sQ + CoreTiled(r, col * 8)) = v;
    }
  }
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
  FenceProxyAsyncShared();
  __syncthreads();  // sQ and tile 0 visible; the slot tables of tiles 0..2 read or visible

  constexpr uint64_t kTileDesc = kPipeTile >> 4;
  constexpr int kRowGroupBytes = (kD / 8) * 128;
  const uint64_t q_desc = WgmmaDesc(SmemAddr(sQ), 128, kRowGroupBytes);
  const uint64_t k_desc0 = WgmmaDesc(SmemAddr(sK0), 128, kRowGroupBytes);
  const uint64_t p_desc = WgmmaDesc(SmemAddr(sP), 128, (kTok / 8) * 128);
  const uint64_t v_desc0 = WgmmaDesc(SmemAddr(sK0 + wg * 32 * 128), kRowGroupBytes, 128);
  auto issue_pv = [&](float (&acc)[128], int buf) {
#pragma unroll
    for (int ks = 0; ks < kTok / 16; ++ks) {
      WgmmaM64N256K16Bf16TransB(acc, p_desc + ks * (256 >> 4),
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
      if (it >= 1) NamedBarrierSync(kBarKReady, kThreads);  // tile `it` complete in buffer `cur`
      // PV(it-1) on our columns, then S = Q K^T(it); both async.
      WgmmaFence();
      if (it >= 1) issue_pv(acc, cur ^ 1);
      WgmmaCommit();
      float d[32];
#pragma unroll
      for (int i = 0; i < 32; ++i) d[i] = 0.f;
#pragma unroll
      for (int ks = 0; ks < kD / 16; ++ks) {
        WgmmaM64N64K16Bf16(d, q_desc + ks * (256 >> 4), k_desc0 + cur * kTileDesc + ks * (256 >> 4), 1);
      }
      WgmmaCommit();
      WgmmaWait<1>();  // our PV(it-1) retired: done with buffer cur ^ 1
      const bool next = it + 1 < n_tiles;
      if (it >= 1 && next) NamedBarrierArrive(kBarKFree, kThreads);
      if (next) {  // our chunks of tile it+1: read only by our own QK^T(it-1) and PV(it-1)
        unpack_units(sK0 + (cur ^ 1) * kPipeTile, C0{});
        FenceProxyAsyncShared();
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
      if (it >= 1) NamedBarrierSync(kBarPFree, kThreads);  // warpgroup 1 done with P(it-1)
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
      FenceProxyAsyncShared();
      __threadfence_block();
      NamedBarrierArrive(kBarPReady, kThreads);
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
        if (it >= 1) NamedBarrierSync(kBarKFree, kThreads);  // warpgroup 0's PV(it-1) retired
        unpack_units(sK0 + (cur ^ 1) * kPipeTile, C1{});
        FenceProxyAsyncShared();
        if (wg1_tid < kTok) {
          sSlot[(it % 3) * kTok + wg1_tid] = slot_next;  // tile it+3 (tile it's rows are read)
          slot_next = slot_of(j0 + 4 * kTok + wg1_tid);
        }
        __threadfence_block();
        NamedBarrierArrive(kBarKReady, kThreads);
        if (it + 2 < n_tiles) load_units(sSlot + ((it + 2) % 3) * kTok, C1{});
      }
      NamedBarrierSync(kBarPReady, kThreads);  // P(it) and its factors
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
      if (it + 1 < n_tiles) NamedBarrierArrive(kBarPFree, kThreads);
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

// Combines the splits of one (request, row) in split order. 128 threads x 4 columns.
__global__ void __launch_bounds__(128) MlaMergeKernel(const KParams p) {
  const int r = blockIdx.x, b = blockIdx.y;
  const int group = r / kRows, row = r % kRows;
  const int ql = p.q_lens ? p.q_lens[b] : p.q_len;
  const int col = threadIdx.x * 4;
  uint16_t* o = p.out + (static_cast<int64_t>(b) * p.rows + r) * kDL + col;
  if (r / p.heads >= ql) {
    *reinterpret_cast<uint2*>(o) = make_uint2(0u, 0u);
    return;
  }
  const int64_t base = (static_cast<int64_t>(b) * p.row_groups + group) * p.splits * kRows + row;
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
  using Kernel = void (*)(const KParams);
  cudaError_t e;
  int dev = 0, sms = 0;
  if ((e = cudaGetDevice(&dev)) != cudaSuccess) return e;
  if ((e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess) return e;
  // kWgmmaPipe covers every shape v4 does (same CTA, tiles and split plan:
  // paged or not, any page size, ragged q_lens, q_len 1..8, H up to 128, any
  // split count); it falls back to v4 only on a device whose per-block shared
  // memory is under its 226 KB (H100/H200 have 227 KB).
  MlaVariant variant = a.variant;
  if (variant == MlaVariant::kWgmmaPipe) {
    int smem_optin = 0;
    if ((e = cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev)) != cudaSuccess) {
      return e;
    }
    if (smem_optin < kSmemBytesPipe) variant = MlaVariant::kWgmmaPv;
  }
  if (variant == MlaVariant::kWgmmaRoles) {
    int smem_optin = 0;
    if ((e = cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev)) != cudaSuccess) {
      return e;
    }
    if (smem_optin < kSmemBytesRoles) variant = MlaVariant::kWgmmaPv;
  }
  Kernel kernel;
  switch (variant) {
    case MlaVariant::kMmaSync:
      kernel = a.fnuz ? MlaDecodeKernel<true, 0> : MlaDecodeKernel<false, 0>;
      break;
    case MlaVariant::kWgmma:
      kernel = a.fnuz ? MlaDecodeKernel<true, 1> : MlaDecodeKernel<false, 1>;
      break;
    case MlaVariant::kWgmmaPvSw:
      kernel = a.fnuz ? MlaDecodeKernel<true, 3> : MlaDecodeKernel<false, 3>;
      break;
    case MlaVariant::kWgmmaPipe:
      kernel = a.fnuz ? MlaDecodePipeKernel<true> : MlaDecodePipeKernel<false>;
      break;
    case MlaVariant::kWgmmaRoles:
      kernel = a.fnuz ? MlaDecodeRolesKernel<true, kRolesC0> : MlaDecodeRolesKernel<false, kRolesC0>;
      break;
    default:
      kernel = a.fnuz ? MlaDecodeKernel<true, 2> : MlaDecodeKernel<false, 2>;
      break;
  }
  const int smem_bytes = variant == MlaVariant::kWgmmaPvSw    ? kSmemBytesSw
                         : variant == MlaVariant::kWgmmaPipe  ? kSmemBytesPipe
                         : variant == MlaVariant::kWgmmaRoles ? kSmemBytesRoles
                                                              : kSmemBytes;
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
  kernel<<<grid, kThreads, smem_bytes, stream>>>(p);
  e = cudaGetLastError();
  if (e == cudaSuccess && plan.splits > 1) {
    MlaMergeKernel<<<dim3(p.rows, a.batch), 128, 0, stream>>>(p);
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
