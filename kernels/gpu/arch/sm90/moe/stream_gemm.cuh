// The weight-streaming MoE GEMM for decode (a few rows per expert, any
// stage), included by its instantiation files stream_gemm_<epilogue>.cu.
//
// At decode the GEMM is bound by the touched experts' MXFP4 bytes, so each
// byte is read once per expert tile and as many as possible are in flight.
// A warp owns 16 weight rows of one expert tile (16 rows of pairs) and walks
// K in chunks of kChunk (256 where K allows, else 128) on its own cp.async
// pipeline (no block barrier in the loop): per 128-element span of a chunk
// a thread copies 16 bytes (one E8M0 block) of each of its two weight rows,
// dequantizes them exactly in registers and feeds mma.sync m16n8k16 with the
// weights as the M operand and the tile's pairs as N (one n8 tile, a second
// only when the tile holds more than 8 rows). The K order inside a span is
// permuted identically in both operands, so the E2M1 nibbles become bf16x2
// pairs with integer ops alone (pair j of a word: nibbles j and j + 4; a
// mask, a multiply and a mask each, see PairBits).
// The chunk size changes only the per-chunk overhead (waits, copies'
// addressing, scale loads, the vote, the loop), never which mma steps
// accumulate in which order. SwiGLU: a warp's 16 rows are 8 gate rows and
// the 8 up rows of the same intermediate columns, so silu(gate) * up meets
// in one thread.
//
// The activations: when the tile's rows fit beside the stages, the CTA
// copies them once into shared memory already in the permuted K order, so a
// span's B operand is one 16-byte shared load per 8 elements; otherwise each
// warp loads them from global memory per chunk and permutes them with PRMT.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM90_MOE_STREAM_GEMM_CUH_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM90_MOE_STREAM_GEMM_CUH_

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/gpu/arch/sm80/mma.cuh"
#include "kernels/gpu/arch/sm90/moe/moe_gemm.h"
#include "kernels/gpu/arch/sm90/moe/moe_gemm_common.cuh"
#include "kernels/gpu/common/bf16.cuh"
#include "kernels/gpu/moe/moe_params.h"

namespace kernelserve {
namespace gpu {
namespace moe {
namespace stream {

using sm80::CpAsync4;
using sm80::CpAsyncCommit;
using sm80::CpAsyncWait;
using sm80::MmaBf16;
using sm80::SmemAddr;

constexpr int kWarps = kStreamWarps;
constexpr int kThreads = kWarps * 32;
constexpr int kSpan = 128;  // 4 threads x one 32-element E8M0 block

// Dynamic shared memory per CTA that keeps 5 CTAs on an SM (the register
// limit): 5 x (44 KB + 1 KB the runtime reserves per CTA) <= 228 KB.
constexpr int kSmemBudget = 44 * 1024;

// A warp's pipeline stage of one chunk in shared memory: for each of the
// lane's two weight rows and each span of the chunk, the lane's 16 bytes,
// then each row's scale bytes (the chunk's E8M0 blocks; lane c uses byte c
// of each 4). Lane-contiguous, so the reads are conflict-free; each lane
// reads back only what it copied itself, so a lane's own cp.async wait is
// the only synchronisation. 256-element chunks take half the stages of
// 128-element ones (the same shared memory; after each issue 512 elements
// of every row are in flight instead of 640, the L2::256B prefetch adds to
// both): more stages would leave no room for x at 5 CTAs per SM.
template <int kChunk>
struct Chunk {
  static_assert(kChunk == 128 || kChunk == 256, "chunks of one or two spans");
  static constexpr int kSpans = kChunk / kSpan;
  static constexpr int kStages = kSpans == 1 ? 6 : 3;
  static constexpr int kScaleOff = 2 * kSpans * 512;  // two rows x spans x 32 lanes x 16 bytes
  static constexpr int kScaleBytes = 4 * kSpans;      // per lane per row
  static constexpr int kStageBytes = kScaleOff + 2 * 32 * kScaleBytes;
  static constexpr int kSmemBytes = kWarps * kStages * kStageBytes;  // the stages of all warps
};

// kTwo: some thread's scale needs the second multiply (its f2 is 1.0 where
// it does not: f1 alone is then exact, and 0x3F80 * 1 changes nothing).
template <bool kTwo>
__device__ __forceinline__ uint32_t Scale(uint32_t v, const BlockScale& s) {
  v = MulBf16x2(v, s.f1);
  return kTwo ? MulBf16x2(v, s.one ? 0x3F803F80u : s.f2) : v;
}

// One word of 8 nibbles -> 4 bf16x2 (pair j: nibbles j and j + 4), scaled.
template <bool kTwo>
__device__ __forceinline__ void DequantWord(uint32_t w, const BlockScale& s, uint32_t (&o)[4]) {
  const uint32_t h = w >> 8;
  o[0] = Scale<kTwo>(PairBits<0>(w), s);
  o[1] = Scale<kTwo>(PairBits<1>(w), s);
  o[2] = Scale<kTwo>(PairBits<0>(h), s);
  o[3] = Scale<kTwo>(PairBits<1>(h), s);
}

// Eight bf16 x elements e0..e7 (as loaded) -> the four B words of their two
// mma steps: (e0, e4), (e1, e5), (e2, e6), (e3, e7), the nibble pairs'
// order.
__device__ __forceinline__ uint4 PermuteX(const uint4& x) {
  return make_uint4(Prmt(x.x, x.z, 0x5410), Prmt(x.x, x.z, 0x7632), Prmt(x.y, x.w, 0x5410),
                    Prmt(x.y, x.w, 0x7632));
}

// 16 bytes of a weight row into shared memory, bypassing L1, with a 256-byte
// L2 prefetch: the row's next chunks are the next bytes, so DRAM sees long
// bursts and more of the stream is in flight than the stages hold.
__device__ __forceinline__ void CopyWeights(uint32_t dst, const void* src) {
  sm80::CpAsync16Prefetch256(dst, src, 16);
}

// A row's kBytes (4 or 8) of E8M0 scales of one chunk.
template <int kBytes>
__device__ __forceinline__ void CopyScales(uint32_t dst, const void* src) {
  if constexpr (kBytes == 4) {
    CpAsync4(dst, src, 4);
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(dst), "l"(src));
  }
}

// The tile's x rows in shared memory, in the mma's K order: row r, span j
// (K elements 128j ..), 8-element group (c, q) (elements 128j + 32c + 8q ..,
// thread c's q-th group) holds PermuteX of the group at byte
// r * 2K + 256j + 64 (q ^ (r & 1)) + 16c. The four threads of one row then
// read 64 contiguous bytes, and rows r and r + 1 (lanes 0-7 of one
// 16-byte-load phase) the two 64-byte halves of the 32 banks: conflict-free.
// x row r is the one of the tile's pair r; every thread of the CTA copies.
__device__ __forceinline__ void FillX(uint8_t* xsm, const GemmParams& p, const int* sorted, int valid) {
  const int groups = static_cast<int>(p.k / 8);  // per row
  const int total = valid * groups;
  constexpr int kBatch = 8;  // loads in flight per thread
  for (int i0 = threadIdx.x; i0 < total; i0 += kBatch * kThreads) {
    uint4 v[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = i0 + b * kThreads;
      v[b] = make_uint4(0, 0, 0, 0);
      if (i < total) {
        const int r = i / groups, gi = i - r * groups;
        const int pair = sorted[r];
        if (pair >= 0) {
          v[b] = __ldg(reinterpret_cast<const uint4*>(p.a + static_cast<int64_t>(pair / p.a_row_div) * p.k) + gi);
        }
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = i0 + b * kThreads;
      if (i < total) {
        const int r = i / groups, gi = i - r * groups;
        const int j = gi >> 4, c = (gi >> 2) & 3, q = gi & 3;
        *reinterpret_cast<uint4*>(xsm + static_cast<int64_t>(r) * 2 * p.k + 256 * j + 64 * (q ^ (r & 1)) + 16 * c) =
            PermuteX(v[b]);
      }
    }
  }
}

// One span: a thread's 16 bytes of each weight row (w0v, w1v) with their
// block scales, against B words xb(t, q) (tile t, the thread's q-th group):
// 8 mma steps per n8 tile, in the span's K order.
template <int kNt, bool kTwo, class XB>
__device__ __forceinline__ void SpanMma(const uint4& w0v, const uint4& w1v, const BlockScale& sc0,
                                        const BlockScale& sc1, const XB& xb, float (&acc)[2][4]) {
  const uint32_t w0[4] = {w0v.x, w0v.y, w0v.z, w0v.w};
  const uint32_t w1[4] = {w1v.x, w1v.y, w1v.z, w1v.w};
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    uint32_t a0[4], a1[4];
    DequantWord<kTwo>(w0[q], sc0, a0);
    DequantWord<kTwo>(w1[q], sc1, a1);
#pragma unroll
    for (int t = 0; t < kNt; ++t) {
      const uint4 b = xb(t, q);
      MmaBf16(acc[t], a0[0], a1[0], a0[1], a1[1], b.x, b.y);
      MmaBf16(acc[t], a0[2], a1[2], a0[3], a1[3], b.z, b.w);
    }
  }
}

// The cp.async side of a warp's K loop: this lane's copies of the next
// chunk into a given stage (no registers held by data in flight). Past the
// end it commits an empty group, which keeps the wait counts uniform.
template <int kChunk>
struct WeightStream {
  using C = Chunk<kChunk>;
  uint32_t base;                     // the warp's stages
  const uint8_t *w0, *w1, *s0, *s1;  // this lane's bytes of the next chunk of its two rows
  int left;                          // chunks not yet issued
  int lane;

  __device__ __forceinline__ void Issue(int stage) {
    if (left > 0) {
      const uint32_t st = base + stage * C::kStageBytes;
#pragma unroll
      for (int h = 0; h < C::kSpans; ++h) {
        CopyWeights(st + h * 512 + lane * 16, w0 + h * (kSpan / 2));
        CopyWeights(st + (C::kSpans + h) * 512 + lane * 16, w1 + h * (kSpan / 2));
      }
      CopyScales<C::kScaleBytes>(st + C::kScaleOff + lane * C::kScaleBytes, s0);
      CopyScales<C::kScaleBytes>(st + C::kScaleOff + 32 * C::kScaleBytes + lane * C::kScaleBytes, s1);
      w0 += kChunk / 2;
      w1 += kChunk / 2;
      s0 += C::kScaleBytes;
      s1 += C::kScaleBytes;
      --left;
    }
    CpAsyncCommit();
  }
  // Chunks 0 .. kStages - 2 into the stages of the same index.
  __device__ __forceinline__ void Prologue() {
#pragma unroll
    for (int s = 0; s < C::kStages - 1; ++s) Issue(s);
  }
};

// The E8M0 scales of the lane's row in a stage: byte c of each scale word,
// the row's block of each span of the chunk.
template <int kSpans>
__device__ __forceinline__ void LoadScales(const uint8_t* p, uint32_t sel, uint32_t (&s)[kSpans]) {
  if constexpr (kSpans == 1) {
    s[0] = Prmt(*reinterpret_cast<const uint32_t*>(p), 0, sel);
  } else {
    const uint2 w = *reinterpret_cast<const uint2*>(p);
    s[0] = Prmt(w.x, 0, sel);
    s[1] = Prmt(w.y, 0, sel);
  }
}

// The K loop of one warp over kNt n8 tiles, after ws.Prologue(). kXs: x is
// in shared memory (xb0/xb1: this lane's addresses of its even / odd groups
// of span 0 for each tile); else xrow (this lane's x of each tile in global
// memory, nullptr for padding). Whether some block scale of a chunk needs
// the two-multiply dequantization is decided per chunk by a warp vote, so
// the common case issues one multiply per pair; which path runs changes no
// bit (see Scale).
template <int kChunk, int kNt, bool kXs>
__device__ __forceinline__ void StreamK(WeightStream<kChunk>& ws, int nk, const uint8_t* wsm,
                                        const uint8_t* const (&xb0)[2], const uint8_t* const (&xb1)[2],
                                        const uint16_t* const (&xrow)[2], float (&acc)[2][4]) {
  using C = Chunk<kChunk>;
  // Global x: spans whose x is loaded at the top of a chunk, before the wait;
  // with two n8 tiles only the first (their registers would not fit).
  constexpr int kPre = kXs ? 0 : kNt == 1 ? C::kSpans : 1;
  const uint32_t sel = 0x4440u + (ws.lane & 3);  // PRMT: byte c, zeros above
  int stage = 0;                                  // chunk kc's
  for (int kc = 0; kc < nk; ++kc) {
    uint4 xv[C::kSpans][2][4];
    auto load_x = [&](int h) {
#pragma unroll
      for (int t = 0; t < kNt; ++t) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          xv[h][t][q] = xrow[t] != nullptr
                            ? __ldg(reinterpret_cast<const uint4*>(xrow[t] + kc * kChunk + h * kSpan) + q)
                            : make_uint4(0, 0, 0, 0);
        }
      }
    };
#pragma unroll
    for (int h = 0; h < kPre; ++h) load_x(h);
    CpAsyncWait<C::kStages - 2>();
    const uint8_t* st = wsm + stage * C::kStageBytes;
    uint32_t sc0[C::kSpans], sc1[C::kSpans];
    LoadScales<C::kSpans>(st + C::kScaleOff + ws.lane * C::kScaleBytes, sel, sc0);
    LoadScales<C::kSpans>(st + C::kScaleOff + 32 * C::kScaleBytes + ws.lane * C::kScaleBytes, sel, sc1);
    bool one = true;  // MakeBlockScale's one, for every block of the chunk
#pragma unroll
    for (int h = 0; h < C::kSpans; ++h) one = one && sc0[h] - 1u < 128u && sc1[h] - 1u < 128u;
    // Into the stage chunk kc - 1 left: its reads fed that chunk's mmas.
    // Stage kc itself is read below and refilled only at chunk kc + 1.
    ws.Issue(stage == 0 ? C::kStages - 1 : stage - 1);
    auto run = [&](auto two) {
      constexpr bool kTwo = decltype(two)::value;
#pragma unroll
      for (int h = 0; h < C::kSpans; ++h) {
        const uint4 w0v = *reinterpret_cast<const uint4*>(st + h * 512 + ws.lane * 16);
        const uint4 w1v = *reinterpret_cast<const uint4*>(st + (C::kSpans + h) * 512 + ws.lane * 16);
        // The vote said every block of the chunk needs one multiply, or not.
        const BlockScale b0 = kTwo ? MakeBlockScale(sc0[h]) : OneMultiplyScale(sc0[h]);
        const BlockScale b1 = kTwo ? MakeBlockScale(sc1[h]) : OneMultiplyScale(sc1[h]);
        if constexpr (kXs) {
          const int off = (kc * C::kSpans + h) * 256;
          SpanMma<kNt, kTwo>(w0v, w1v, b0, b1,
                             [&](int t, int q) {
                               const uint8_t* b = ((q & 1) ? xb1[t] : xb0[t]) + off + (q & 2) * 64;
                               return *reinterpret_cast<const uint4*>(b);
                             },
                             acc);
        } else {
          if (h >= kPre) load_x(h);
          SpanMma<kNt, kTwo>(w0v, w1v, b0, b1, [&](int t, int q) { return PermuteX(xv[h][t][q]); }, acc);
        }
      }
    };
    if (__all_sync(0xFFFFFFFFu, one)) {
      run(std::false_type());
    } else {
      run(std::true_type());
    }
    stage = stage == C::kStages - 1 ? 0 : stage + 1;
  }
}

template <int kEpi, int kChunk>
__global__ void __launch_bounds__(kThreads, 5) StreamGemmKernel(const GemmParams p) {
  using C = Chunk<kChunk>;
  const int tile = blockIdx.y;
  if (tile >= *p.num_tiles) return;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, c = lane & 3;
  const int unit = blockIdx.x * kWarps + warp;  // 16 weight rows
  constexpr bool kSwiglu = kEpi == kEpiSwiglu;
  // Warps past the matrix still copy x and meet the block barrier below.
  const bool active = kSwiglu ? unit * 8 < p.inter : unit * 16 < p.nw;

  // This thread's two weight rows (M rows g and g + 8); past the matrix they
  // read row 0 and their results are dropped.
  int64_t r0, r1;
  bool ok0, ok1;
  if (kSwiglu) {
    const int col = unit * 8 + g;
    ok0 = ok1 = col < p.inter;
    r0 = col;
    r1 = p.inter + col;
  } else {
    r0 = unit * 16 + g;
    r1 = r0 + 8;
    ok0 = r0 < p.nw;
    ok1 = r1 < p.nw;
  }
  if (!ok0) r0 = 0;
  if (!ok1) r1 = 0;

  const int e = p.tile_expert[tile];
  const int valid = p.tile_rows[tile];
  const int* sorted = p.sorted + tile * kStreamRows;

  extern __shared__ __align__(16) uint8_t smem[];
  uint8_t* wsm = smem + warp * C::kStages * C::kStageBytes;
  uint8_t* xsm = smem + C::kSmemBytes;

  const int64_t kb = p.k / 2, ks = p.k / 32;
  WeightStream<kChunk> ws;
  ws.base = SmemAddr(wsm);
  ws.w0 = p.w + (static_cast<int64_t>(e) * p.nw + r0) * kb + c * 16;
  ws.w1 = p.w + (static_cast<int64_t>(e) * p.nw + r1) * kb + c * 16;
  ws.s0 = p.ws + (static_cast<int64_t>(e) * p.nw + r0) * ks;
  ws.s1 = p.ws + (static_cast<int64_t>(e) * p.nw + r1) * ks;
  const int nk = static_cast<int>(p.k / kChunk);
  ws.left = nk;
  ws.lane = lane;
  if (active) ws.Prologue();  // the weights stream while x is copied

  // x in shared memory when the tile's rows fit beside the stages (the
  // launch sized the memory by the same test); CTA-uniform.
  const bool xs = valid >= 1 && valid * 2 * p.k <= kSmemBudget - C::kSmemBytes;
  if (xs) {
    FillX(xsm, p, sorted, valid);
    __syncthreads();
  }
  if (!active) return;

  // The B operand's rows of this thread: tile rows g and g + 8. In shared
  // memory, padding lanes read a row that exists (their columns are
  // dropped), of the parity that keeps the loads conflict-free.
  const uint8_t* xb0[2];
  const uint8_t* xb1[2];
  const uint16_t* xrow[2];
#pragma unroll
  for (int t = 0; t < 2; ++t) {
    const int r = g + 8 * t;
    const int row = r < valid ? r : (r & 1) < valid ? (r & 1) : 0;
    const uint8_t* b = xsm + static_cast<int64_t>(row) * 2 * p.k + c * 16;
    xb0[t] = b + (row & 1) * 64;
    xb1[t] = b + (~row & 1) * 64;
    const int pair = r < valid ? sorted[r] : -1;
    xrow[t] = pair < 0 ? nullptr : p.a + static_cast<int64_t>(pair / p.a_row_div) * p.k + c * 32;
  }

  float acc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
  const bool two = valid > 8;  // warp-uniform: the second n8 tile holds pairs
  if (xs) {
    if (two) {
      StreamK<kChunk, 2, true>(ws, nk, wsm, xb0, xb1, xrow, acc);
    } else {
      StreamK<kChunk, 1, true>(ws, nk, wsm, xb0, xb1, xrow, acc);
    }
  } else if (two) {
    StreamK<kChunk, 2, false>(ws, nk, wsm, xb0, xb1, xrow, acc);
  } else {
    StreamK<kChunk, 1, false>(ws, nk, wsm, xb0, xb1, xrow, acc);
  }

  // Accumulator (t, q): weight row g (q < 2) or g + 8, tile row 8t + 2c + q % 2.
#pragma unroll
  for (int t = 0; t < 2; ++t) {
    if (t == 1 && !two) continue;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = 8 * t + 2 * c + h;
      const int pair = r < valid ? sorted[r] : -1;
      if (pair < 0) continue;
      const float v0 = acc[t][h], v1 = acc[t][2 + h];
      if (kSwiglu) {
        if (!ok0) continue;
        const float v = v0 / (1.f + expf(-v0)) * v1;
        static_cast<uint16_t*>(p.out)[static_cast<int64_t>(pair) * p.out_cols + r0] =
            static_cast<uint16_t>(FloatToBf16Bits(v, p.rounding));
      } else if (kEpi == kEpiF32) {
        float* o = static_cast<float*>(p.out) + static_cast<int64_t>(pair) * p.out_cols;
        if (ok0) o[r0] = v0;
        if (ok1) o[r1] = v1;
      } else {
        uint16_t* o = static_cast<uint16_t*>(p.out) + static_cast<int64_t>(pair) * p.out_cols;
        if (ok0) o[r0] = static_cast<uint16_t>(FloatToBf16Bits(v0, p.rounding));
        if (ok1) o[r1] = static_cast<uint16_t>(FloatToBf16Bits(v1, p.rounding));
      }
    }
  }
}

// Shared memory of a launch: the stages, and x's rows when up to
// kStreamRows of them fit in the budget (the kernel's test, for every tile).
template <int kChunk>
int SmemBytes(int64_t k) {
  const int64_t rows = (kSmemBudget - Chunk<kChunk>::kSmemBytes) / (2 * k);
  return Chunk<kChunk>::kSmemBytes + static_cast<int>((rows < kStreamRows ? rows : kStreamRows) * 2 * k);
}

template <int kEpi, int kChunk>
cudaError_t Launch(const GemmParams& p, int64_t col_tiles, int64_t max_tiles, cudaStream_t stream) {
  return LaunchOverTiles<kThreads>(StreamGemmKernel<kEpi, kChunk>, p, col_tiles, max_tiles, SmemBytes<kChunk>(p.k),
                                   stream);
}

}  // namespace stream

// 256-element chunks where K allows (half the per-chunk overhead), else 128
// (down at I = 384).
template <int kEpi>
cudaError_t LaunchStreamGemm(const GemmParams& p, int64_t max_tiles, cudaStream_t stream) {
  const int64_t units = kEpi == kEpiSwiglu ? (p.inter + 7) / 8 : (p.nw + 15) / 16;
  const int64_t col_tiles = (units + stream::kWarps - 1) / stream::kWarps;
  return p.k % 256 == 0 ? stream::Launch<kEpi, 256>(p, col_tiles, max_tiles, stream)
                        : stream::Launch<kEpi, 128>(p, col_tiles, max_tiles, stream);
}

}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM90_MOE_STREAM_GEMM_CUH_
