// The sm_90a decode attention kernel over a PER_HEAD_KV pool (the CTA shape
// and workspace layout in kernels/gpu/decode_attention/decode_attention_params.h;
// numerics in kernels/api/ops.h, DecodeAttentionParams).
//
// Memory-bound: every K and V byte of the CTA's (request, KV head, split) is
// loaded once, by 16-byte cp.async straight from the pool rows named by the
// page table (never copied), into a per-warp ring of kStages 16-token tiles
// (bf16 tiles XOR-swizzled by 16-byte chunk for conflict-free ldmatrix; fp8
// tiles in 128-byte rows swizzled by 16-byte chunk at D 128, rows padded by
// 16 bytes at D 64 and 256, from which each lane reads the codes of
// its own mma B fragments and converts them exactly to bf16 in registers, so
// the fp8 bytes cross shared memory once each way). Each warp takes
// every fourth tile of the split with its own online softmax; S = Q K^T and
// O += P V run on mma.sync m16n8k16 (bf16 in, fp32 accumulate) over 16 * MT
// query rows. Scores are in base 2 with softmax scale * kv_scale folded in;
// P is rounded to bf16 for the MMA and the row sums add the rounded values;
// the warps combine in warp order, then the CTA either writes bf16 (one
// split: O / l * kv_scale rounded once in the requested mode) or its fp32
// partial for the merge. A V row that is not finite is read by P = 0 rows of
// the causal tail only through a scalar path that skips masked keys, so a NaN
// in the pool poisons exactly the rows whose window sees it.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM90_DECODE_ATTENTION_DECODE_KERNEL_CUH_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM90_DECODE_ATTENTION_DECODE_KERNEL_CUH_

#include <cstdint>

#include "kernels/gpu/arch/sm80/mma.cuh"
#include "kernels/gpu/common/bf16.cuh"
#include "kernels/gpu/common/fp8.cuh"
#include "kernels/gpu/common/gpu.h"
#include "kernels/gpu/decode_attention/decode_attention_params.h"

namespace kernelserve {
namespace gpu {
namespace decode {

template <KvFormat F>
struct KvTraits {
  static constexpr int kElt = F == KvFormat::kBf16 ? 2 : 1;
};

// Whether an fp8 tile's 16-byte chunks are XOR-swizzled by row (D 128):
// rows of exactly 128 bytes, so the CTA fits 4 per SM (53248 B; padded rows
// took 59392 B, 3 per SM) and the eight rows a fragment load touches still
// hit eight different 4-bank groups. Other fp8 widths pad rows by 16 bytes
// instead (every fragment offset an immediate).
template <int D, KvFormat F>
constexpr bool Fp8Swizzled() {
  return F != KvFormat::kBf16 && D == 128;
}

// Bytes of one K (or V) row in the ring.
template <int D, KvFormat F>
constexpr int RowPitch() {
  return F == KvFormat::kBf16 ? 2 * D : (Fp8Swizzled<D, F>() ? D : D + 16);
}

// fp8 V: the output column n of n-tile nd is dimension
// (nd / kW) * 8 * kW + n * kW + nd % kW, kW = min(16, D / 8), so the codes a
// lane needs for its B fragments (n = g of every n-tile) are kW contiguous
// bytes of each token row; the accumulators carry the same permutation.
template <int D>
struct VPerm {
  static constexpr int kW = D / 8 < 16 ? D / 8 : 16;
  __host__ __device__ static constexpr int Dim(int nd, int n) { return (nd / kW) * 8 * kW + n * kW + nd % kW; }
};

template <int D>
struct Stages {
  static constexpr int kValue = D == 256 ? 2 : (D == 128 ? 3 : 4);
};

// Dynamic shared memory of one CTA: Q, then the warps' rings, reused for the
// warps' partials at the end.
template <int D, int MT, KvFormat F>
constexpr int SmemBytes() {
  constexpr int q = MT * 16 * D * 2;
  constexpr int ring = kWarps * Stages<D>::kValue * 2 * kTileTokens * RowPitch<D, F>();
  constexpr int merge = kWarps * MT * 16 * (D + 2) * 4;
  return q + (ring > merge ? ring : merge);
}

// Float offset of the 4-aligned dimension d of row `row` in a warp's fp32
// partial. fp8's permuted accumulators store float4s whose dimensions are
// kW apart across the lanes of a quarter-warp; XOR-ing the float4 index
// (within its aligned 8) by those lanes' bits keeps the stores off one bank.
template <int D, KvFormat F>
__device__ __forceinline__ int PartOff(int row, int d) {
  if constexpr (F == KvFormat::kBf16) {
    return row * D + d;
  } else {
    const int f = d >> 2;
    return row * D + ((f ^ (((f >> 3) & 3) | ((row & 1) << 2))) << 2);
  }
}

// Whether either bf16 of a pair is not finite.
__device__ __forceinline__ bool NonFinite(uint32_t bf16x2) {
  return !isfinite(Bf16LoToFloat(bf16x2)) || !isfinite(Bf16HiToFloat(bf16x2));
}

// Byte offset of 16-byte chunk `ch` of row `row` in a tile of kPitch-byte
// rows whose chunks are XOR-swizzled by row.
template <int kPitch>
__device__ __forceinline__ uint32_t SwzPitch(int row, int ch) {
  return static_cast<uint32_t>(row * kPitch + ((ch ^ (row & 7)) << 4));
}

// Byte offset of 16-byte chunk `ch` of row `row` in a swizzled bf16 tile of D columns.
template <int D>
__device__ __forceinline__ uint32_t Swz(int row, int ch) {
  return SwzPitch<2 * D>(row, ch);
}

// Byte offset of the code of dimension d of token row `row` in an fp8 tile.
template <int D, KvFormat F>
__device__ __forceinline__ int Fp8Off(int row, int d) {
  if constexpr (Fp8Swizzled<D, F>()) {
    return static_cast<int>(SwzPitch<D>(row, d >> 4)) + (d & 15);
  } else {
    return row * RowPitch<D, F>() + d;
  }
}

// Two e5m2 codes (low two bytes of v) -> bf16x2, exact (through f16).
__device__ __forceinline__ uint32_t E5m2X2ToBf16x2(uint32_t v) {
  uint32_t h;
  asm("cvt.rn.f16x2.e5m2x2 %0, %1;\n" : "=r"(h) : "h"(static_cast<uint16_t>(v)));
  const float2 f = Half2ToFloat2(h);
  return sm80::PackBf16x2Rn(f.x, f.y);
}

template <KvFormat F>
__device__ __forceinline__ uint32_t Fp8X2ToBf16x2(uint32_t v) {
  if constexpr (F == KvFormat::kE4m3fn) return sm80::E4m3fnX2ToBf16x2(v);
  if constexpr (F == KvFormat::kE4m3fnuz) return E4m3fnuzX2ToBf16x2(v);
  return E5m2X2ToBf16x2(v);
}

template <int D, int MT, KvFormat F>
__global__ void __launch_bounds__(kThreads) DecodeAttentionKernel(const KParams p) {
  constexpr int kElt = KvTraits<F>::kElt;
  constexpr int kStages = Stages<D>::kValue;
  constexpr int kRows = MT * 16;
  constexpr int kPitch = RowPitch<D, F>();            // bytes of one K or V row in the ring
  constexpr int kPartBytes = kTileTokens * kPitch;     // K or V of one tile
  constexpr int kTileBytes = 2 * kPartBytes;
  constexpr int kChunks = D * kElt / 16;  // 16-byte chunks of one K (or V) row
  constexpr int kNd = D / 8;              // n-tiles of the output
  extern __shared__ __align__(128) uint8_t smem[];

  // The merge (a programmatic dependent when there are splits) may be
  // scheduled once every CTA is running; it still waits for this grid's end.
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  const int rg = blockIdx.x;
  const int hkv = blockIdx.y % p.heads_kv;
  const int split = blockIdx.y / p.heads_kv;
  const int b = blockIdx.z;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, c = lane & 3;

  const int seq = p.seq_lens[b];
  const int qlen = p.q_lens != nullptr ? p.q_lens[b] : p.q_len;
  // Read with seq_lens, not after the early return: one global latency less
  // before the first KV load.
  const int32_t* pages = p.kv_indices + p.kv_indptr[b];
  const int start = split * p.chunk;
  if (start >= seq) return;  // the merge skips splits past the request
  const int end = min(seq, start + p.chunk);

  uint8_t* q_s = smem;
  uint8_t* ring = smem + kRows * D * 2 + warp * kStages * kTileBytes;

  // Q rows of this row group, swizzled, by cp.async in a group of their own
  // (waited for after the KV prologue is issued, so the two loads overlap);
  // rows past the group's rows are zeros.
  for (int i = tid; i < kRows * (D / 8); i += kThreads) {
    const int row = i / (D / 8), ch = i % (D / 8);
    const int r = rg * kRows + row;
    const int t = r / p.group, h = hkv * p.group + r % p.group;
    const uint16_t* src =
        r < p.rows ? p.q + ((static_cast<int64_t>(b) * p.q_len + t) * p.heads_q + h) * D + ch * 8 : p.q;
    sm80::CpAsync16(sm80::SmemAddr(q_s) + Swz<D>(row, ch), src, r < p.rows ? 16 : 0);
  }
  sm80::CpAsyncCommit();

  // Last key each owned row sees within this split (-1: none): rows g and
  // g + 8 of each m-tile.
  int lim[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int r = rg * kRows + mt * 16 + g + hh * 8;
      const int t = r / p.group;
      lim[mt][hh] = (r < p.rows && t < qlen) ? min(seq - qlen + t, end - 1) : -1;
    }
  }
  // Keys (seq - qlen, seq) are seen by some rows and not others.
  const int tail_from = seq - qlen + 1;

  const int ntiles = (end - start + kTileTokens - 1) / kTileTokens;
  const int my_tiles = ntiles > warp ? (ntiles - warp + kWarps - 1) / kWarps : 0;
  const int64_t row_bytes = p.row_elems * kElt;
  const uint8_t* head_k = p.pool + static_cast<int64_t>(hkv) * D * kElt;
  const int64_t v_off = static_cast<int64_t>(p.heads_kv) * D * kElt;

  // The page of the lane's token in the warp's tile i (lanes below
  // kTileTokens, tokens before end). Read a tile ahead of the tile's
  // cp.async, so the page-table load is off the ring's critical path.
  auto page_of = [&](int i) -> int32_t {
    const int j = start + (warp + i * kWarps) * kTileTokens + lane;
    return (i < my_tiles && lane < kTileTokens && j < end) ? pages[j / p.page_size] : 0;
  };
  auto issue = [&](int i, int32_t page) {
    if (i < my_tiles) {
      const int j0 = start + (warp + i * kWarps) * kTileTokens;
      uint8_t* st = ring + (i % kStages) * kTileBytes;
      int64_t my_slot = 0;
      if (lane < kTileTokens && j0 + lane < end) {
        const int j = j0 + lane;
        my_slot = static_cast<int64_t>(page) * p.page_size + j % p.page_size;
      }
#pragma unroll
      for (int k = 0; k < kChunks; ++k) {
        const int f = k * 32 + lane;
        const int tok = f / (2 * kChunks), part = (f / kChunks) & 1, ch = f % kChunks;
        const int64_t slot = __shfl_sync(0xffffffffu, my_slot, tok);
        const bool ok = j0 + tok < end;
        const uint8_t* src = head_k + slot * row_bytes + (part ? v_off : 0) + ch * 16;
        const uint32_t dst = sm80::SmemAddr(st + part * kPartBytes) +
                             (kElt == 2 ? Swz<D>(tok, ch) : static_cast<uint32_t>(Fp8Off<D, F>(tok, ch * 16)));
        sm80::CpAsync16(dst, ok ? src : p.pool, ok ? 16 : 0);
      }
    }
    sm80::CpAsyncCommit();
  };

  float acc[MT][kNd][4];
  float m[MT][2], l[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int n = 0; n < kNd; ++n) acc[mt][n][0] = acc[mt][n][1] = acc[mt][n][2] = acc[mt][n][3] = 0.f;
    m[mt][0] = m[mt][1] = -INFINITY;
    l[mt][0] = l[mt][1] = 0.f;
  }

  int32_t first_pages[kStages - 1];
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) first_pages[s] = page_of(s);
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) issue(s, first_pages[s]);
  int32_t next_page = page_of(kStages - 1);
  // The Q group is the oldest of kStages pending.
  sm80::CpAsyncWait<kStages - 1>();
  __syncthreads();  // Q
  const uint32_t q_addr = sm80::SmemAddr(q_s);

  for (int i = 0; i < my_tiles; ++i) {
    issue(i + kStages - 1, next_page);
    next_page = page_of(i + kStages);
    sm80::CpAsyncWait<kStages - 1>();
    __syncwarp();
    const int j0 = start + (warp + i * kWarps) * kTileTokens;
    const uint8_t* tile = ring + (i % kStages) * kTileBytes;
    const uint8_t* vt = tile + kPartBytes;
    const uint32_t k_addr = sm80::SmemAddr(tile);
    const uint32_t v_addr = k_addr + kPartBytes;
    const int mat = lane >> 3;

    // The K B fragments of k-step kk: kb[0..1] for tokens 0-7, kb[2..3] for
    // 8-15. fp8: the lane's codes (token nt * 8 + g, dims kk * 16 + 2c, +1 and
    // +8, +9) by two 16-bit loads per n-tile, converted as the bf16 tile
    // would have been: the same B fragments, so the same S.
    auto k_frag = [&](int kk, uint32_t(&kb)[4]) {
      if constexpr (kElt == 2) {
        const int n = (lane & 7) + (mat >> 1) * 8;
        sm80::LdMatrixX4(k_addr + Swz<D>(n, kk * 2 + (mat & 1)), kb);
      } else {
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          const uint8_t* kr = tile + Fp8Off<D, F>(nt * 8 + g, kk * 16 + 2 * c);
          kb[2 * nt] = Fp8X2ToBf16x2<F>(*reinterpret_cast<const uint16_t*>(kr));
          kb[2 * nt + 1] = Fp8X2ToBf16x2<F>(*reinterpret_cast<const uint16_t*>(kr + 8));
        }
      }
    };
    // V of token k as bf16x2 at the two accumulator columns (2c, 2c + 1) of
    // n-tile n (the scalar path).
    auto v_pair = [&](int k, int n) -> uint32_t {
      if constexpr (kElt == 2) {
        return *reinterpret_cast<const uint32_t*>(vt + Swz<D>(k, n) + c * 4);
      } else {
        const int d = VPerm<D>::Dim(n, 2 * c);
        return Fp8X2ToBf16x2<F>(vt[Fp8Off<D, F>(k, d)] |
                                (static_cast<uint32_t>(vt[Fp8Off<D, F>(k, d + VPerm<D>::kW)]) << 8));
      }
    };

    // S = Q K^T over 16 tokens.
    float s[MT][2][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[mt][0][e] = s[mt][1][e] = 0.f;
    }
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t kb[4];
      k_frag(kk, kb);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        uint32_t qa[4];
        const int row = mt * 16 + (lane & 7) + (mat & 1) * 8;
        sm80::LdMatrixX4(q_addr + Swz<D>(row, kk * 2 + (mat >> 1)), qa);
        sm80::MmaBf16(s[mt][0], qa, kb[0], kb[1]);
        sm80::MmaBf16(s[mt][1], qa, kb[2], kb[3]);
      }
    }

    // Online softmax (base 2); P rounded to bf16 and summed as rounded.
    uint32_t pa[MT][4];
    float pf[MT][2][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int j = j0 + nt * 8 + 2 * c + e;
            float& x = s[mt][nt][hh * 2 + e];
            x = j <= lim[mt][hh] ? x * p.sl2 : -INFINITY;
            mx = fmaxf(mx, x);
          }
        }
        mx = fmaxf(mx, ShflXor(mx, 1));
        mx = fmaxf(mx, ShflXor(mx, 2));
        const float m_new = fmaxf(m[mt][hh], mx);
        const float m_use = m_new == -INFINITY ? 0.f : m_new;
        const float alpha = Exp2Approx(m[mt][hh] - m_use);
        m[mt][hh] = m_new;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          const uint32_t pk = sm80::PackBf16x2Rn(Exp2Approx(s[mt][nt][hh * 2] - m_use),
                                                 Exp2Approx(s[mt][nt][hh * 2 + 1] - m_use));
          pa[mt][nt * 2 + hh] = pk;
          pf[mt][nt][hh * 2] = Bf16LoToFloat(pk);
          pf[mt][nt][hh * 2 + 1] = Bf16HiToFloat(pk);
          sum += pf[mt][nt][hh * 2] + pf[mt][nt][hh * 2 + 1];
        }
        l[mt][hh] = l[mt][hh] * alpha + sum;
#pragma unroll
        for (int n = 0; n < kNd; ++n) {
          acc[mt][n][hh * 2] *= alpha;
          acc[mt][n][hh * 2 + 1] *= alpha;
        }
      }
    }

    // A non-finite V among the causal tail's keys would turn 0 * V into NaN
    // for rows that do not see it: such tiles take the scalar path.
    bool bad = false;
    if (j0 + kTileTokens > tail_from && j0 < seq && qlen > 1) {
      for (int e = lane; e < kTileTokens * D * kElt / 4; e += 32) {
        const int tok = e / (D * kElt / 4);
        if (j0 + tok < tail_from || j0 + tok >= end) continue;
        // Any order of the row's words will do: a swizzle permutes chunks within the row.
        const uint32_t w = *reinterpret_cast<const uint32_t*>(vt + tok * kPitch + (e % (D * kElt / 4)) * 4);
        if constexpr (kElt == 2) {
          bad |= NonFinite(w);
        } else {
          bad |= NonFinite(Fp8X2ToBf16x2<F>(w)) || NonFinite(Fp8X2ToBf16x2<F>(w >> 16));
        }
      }
      bad = __any_sync(0xffffffffu, bad);
    }
    if (!bad) {
      if constexpr (kElt == 2) {
#pragma unroll
        for (int dd = 0; dd < D / 16; ++dd) {
          uint32_t vb[4];
          const int tok = (lane & 7) + (mat & 1) * 8;
          sm80::LdMatrixX4Trans(v_addr + Swz<D>(tok, dd * 2 + (mat >> 1)), vb);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            sm80::MmaBf16(acc[mt][2 * dd], pa[mt], vb[0], vb[1]);
            sm80::MmaBf16(acc[mt][2 * dd + 1], pa[mt], vb[2], vb[3]);
          }
        }
      } else {
        // The lane's B fragments of every n-tile: tokens 2c, 2c + 1 (b0) and
        // 2c + 8, 2c + 9 (b1) at the kW dims of VPerm's column g; one byte
        // permute pairs two tokens' codes of two dims.
        constexpr int kW = VPerm<D>::kW;
#pragma unroll
        for (int grp = 0; grp < D / 8 / kW; ++grp) {
          uint32_t raw[4][kW / 4];
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const uint8_t* src = vt + Fp8Off<D, F>(2 * c + (r & 1) + (r >> 1) * 8, VPerm<D>::Dim(grp * kW, g));
            if constexpr (kW == 16) {
              const uint4 u = *reinterpret_cast<const uint4*>(src);
              raw[r][0] = u.x;
              raw[r][1] = u.y;
              raw[r][2] = u.z;
              raw[r][3] = u.w;
            } else {
              static_assert(kW == 8, "head_dim 64, 128 or 256");
              const uint2 u = *reinterpret_cast<const uint2*>(src);
              raw[r][0] = u.x;
              raw[r][1] = u.y;
            }
          }
#pragma unroll
          for (int w = 0; w < kW / 4; ++w) {
            const uint32_t lo[2] = {__byte_perm(raw[0][w], raw[1][w], 0x5140), __byte_perm(raw[2][w], raw[3][w], 0x5140)};
            const uint32_t hi[2] = {__byte_perm(raw[0][w], raw[1][w], 0x7362), __byte_perm(raw[2][w], raw[3][w], 0x7362)};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              const int nd = grp * kW + 4 * w + j;
              const uint32_t b0 = Fp8X2ToBf16x2<F>((j < 2 ? lo[0] : hi[0]) >> (16 * (j & 1)));
              const uint32_t b1 = Fp8X2ToBf16x2<F>((j < 2 ? lo[1] : hi[1]) >> (16 * (j & 1)));
#pragma unroll
              for (int mt = 0; mt < MT; ++mt) sm80::MmaBf16(acc[mt][nd], pa[mt], b0, b1);
            }
          }
        }
      }
    } else {
      for (int k = 0; k < kTileTokens; ++k) {
        const int src_lane = (lane & ~3) | ((k & 7) >> 1);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            // Selects, not indexing by k: the fragments stay in registers.
            const float lo = (k >> 3) ? pf[mt][1][hh * 2] : pf[mt][0][hh * 2];
            const float hi = (k >> 3) ? pf[mt][1][hh * 2 + 1] : pf[mt][0][hh * 2 + 1];
            const float pv = __shfl_sync(0xffffffffu, (k & 1) ? hi : lo, src_lane);
            if (j0 + k > lim[mt][hh]) continue;
#pragma unroll
            for (int n = 0; n < kNd; ++n) {
              const uint32_t w = v_pair(k, n);
              acc[mt][n][hh * 2] += pv * Bf16LoToFloat(w);
              acc[mt][n][hh * 2 + 1] += pv * Bf16HiToFloat(w);
            }
          }
        }
      }
    }
    __syncwarp();  // the ring stage is rewritten next
  }
  sm80::CpAsyncWait<0>();

#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      l[mt][hh] += ShflXor(l[mt][hh], 1);
      l[mt][hh] += ShflXor(l[mt][hh], 2);
    }
  }

  // The warps' partials, combined in warp order.
  __syncthreads();
  float* mo = reinterpret_cast<float*>(smem + kRows * D * 2);  // [warp][row][D]
  float* mml = mo + kWarps * kRows * D;                          // [warp][row][2]
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int row = mt * 16 + g + hh * 8;
      float* o = mo + warp * kRows * D;
      if constexpr (kElt == 2) {
#pragma unroll
        for (int n = 0; n < kNd; ++n) {
          *reinterpret_cast<float2*>(o + PartOff<D, F>(row, n * 8 + 2 * c)) =
              make_float2(acc[mt][n][hh * 2], acc[mt][n][hh * 2 + 1]);
        }
      } else {
        // Column 2c + e of n-tiles grp * kW .. + kW - 1: kW contiguous dims.
        constexpr int kW = VPerm<D>::kW;
#pragma unroll
        for (int grp = 0; grp < D / 8 / kW; ++grp) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
#pragma unroll
            for (int q4 = 0; q4 < kW / 4; ++q4) {
              const int nd = grp * kW + q4 * 4;
              // One 16-byte store (nvcc split some of these into four).
              const uint32_t at = sm80::SmemAddr(o + PartOff<D, F>(row, VPerm<D>::Dim(nd, 2 * c + e)));
              asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(at), "f"(acc[mt][nd][hh * 2 + e]),
                           "f"(acc[mt][nd + 1][hh * 2 + e]), "f"(acc[mt][nd + 2][hh * 2 + e]),
                           "f"(acc[mt][nd + 3][hh * 2 + e])
                           : "memory");
            }
          }
        }
      }
      if (c == 0) {
        mml[(warp * kRows + row) * 2] = m[mt][hh];
        mml[(warp * kRows + row) * 2 + 1] = l[mt][hh];
      }
    }
  }
  __syncthreads();
  for (int i = tid; i < kRows * (D / 4); i += kThreads) {
    const int row = i / (D / 4), d0 = (i % (D / 4)) * 4;
    const int r = rg * kRows + row;
    if (r >= p.rows) continue;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, mml[(w * kRows + row) * 2]);
    float sum = 0.f;
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float mw = mml[(w * kRows + row) * 2];
      if (mw == -INFINITY) continue;
      const float wt = Exp2Approx(mw - mx);
      sum += wt * mml[(w * kRows + row) * 2 + 1];
      const float4 v = *reinterpret_cast<const float4*>(mo + w * kRows * D + PartOff<D, F>(row, d0));
      o.x += wt * v.x;
      o.y += wt * v.y;
      o.z += wt * v.z;
      o.w += wt * v.w;
    }
    const int t = r / p.group, h = hkv * p.group + r % p.group;
    if (p.splits == 1) {
      uint16_t* dst = p.out + ((static_cast<int64_t>(b) * p.q_len + t) * p.heads_q + h) * D + d0;
      uint2 bits = make_uint2(0u, 0u);
      if (t < qlen) {
        const float inv = p.out_scale / sum;
        bits = make_uint2(PackBf16x2(o.x * inv, o.y * inv, p.rounding), PackBf16x2(o.z * inv, o.w * inv, p.rounding));
      } else {
        bits = make_uint2(PackBf16x2(0.f, 0.f, p.rounding), PackBf16x2(0.f, 0.f, p.rounding));
      }
      *reinterpret_cast<uint2*>(dst) = bits;
    } else {
      const int64_t pi =
          (((static_cast<int64_t>(b) * p.heads_kv + hkv) * p.row_groups + rg) * p.splits + split) * kRows + row;
      *reinterpret_cast<float4*>(p.part_o + pi * D + d0) = o;
      if (d0 == 0) *reinterpret_cast<float2*>(p.part_ml + pi * 2) = make_float2(mx, sum);
    }
  }
}

// The kernel of (head_dim, mt) for format F; fn == nullptr when none is built.
template <KvFormat F>
DecodeKernel MakeDecodeKernel(int head_dim, int mt) {
  DecodeKernel k;
  k.mt = mt;
  if (mt == 1) {
    if (head_dim == 64) k = {DecodeAttentionKernel<64, 1, F>, kThreads, SmemBytes<64, 1, F>(), 1};
    if (head_dim == 128) k = {DecodeAttentionKernel<128, 1, F>, kThreads, SmemBytes<128, 1, F>(), 1};
    if (head_dim == 256) k = {DecodeAttentionKernel<256, 1, F>, kThreads, SmemBytes<256, 1, F>(), 1};
  } else if (mt == 2) {
    if (head_dim == 64) k = {DecodeAttentionKernel<64, 2, F>, kThreads, SmemBytes<64, 2, F>(), 2};
    if (head_dim == 128) k = {DecodeAttentionKernel<128, 2, F>, kThreads, SmemBytes<128, 2, F>(), 2};
  }
  return k;
}

}  // namespace decode
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM90_DECODE_ATTENTION_DECODE_KERNEL_CUH_
