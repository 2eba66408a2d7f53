// The weight-streaming MoE GEMM for decode (a few rows per expert, any
// stage), included by its instantiation files stream_gemm_<epilogue>.cu.
//
// At decode the GEMM is bound by the touched experts' MXFP4 bytes, so each
// byte is read once per expert tile and as many as possible are in flight.
// A warp owns 16 weight rows of one expert tile (16 rows of pairs) and walks
// K in chunks of 128 on its own cp.async pipeline of kStages chunks (no
// block barrier): per chunk a thread copies 16 bytes (one E8M0 block) of
// each of its two weight rows, dequantizes them exactly in registers and
// feeds mma.sync m16n8k16 with the weights as the M operand
// and the tile's pairs as N (one n8 tile, a second only when the tile holds
// more than 8 rows). The K order inside a chunk is permuted identically in
// both operands, so the E2M1 nibbles become bf16x2 pairs with shifts and
// masks alone (pair j of a word: nibbles j and j + 4). SwiGLU: a warp's 16
// rows are 8 gate rows and the 8 up rows of the same intermediate columns, so
// silu(gate) * up meets in one thread.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM90_MOE_STREAM_GEMM_CUH_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM90_MOE_STREAM_GEMM_CUH_

#include <cmath>
#include <cstdint>

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
constexpr int kChunk = 128;  // K per step of a warp: 4 threads x one 32-element E8M0 block
constexpr int kStages = 6;   // chunks in flight per warp, in shared memory

// Nibbles 0 and 4 (pair 0) and 1 and 5 (pair 1) of v -> bf16x2 of value *
// 2^-126: magnitude bits to bf16 bits 6..8, the sign to bit 15 (as
// Fp4PairBits, for a nibble pair four apart).
__device__ __forceinline__ uint32_t Pair0(uint32_t v) {
  return ((v * 64u) & 0x01C001C0u) | ((v * 4096u) & 0x80008000u);
}
__device__ __forceinline__ uint32_t Pair1(uint32_t v) {
  return ((v * 4u) & 0x01C001C0u) | ((v * 256u) & 0x80008000u);
}

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
  o[0] = Scale<kTwo>(Pair0(w), s);
  o[1] = Scale<kTwo>(Pair1(w), s);
  o[2] = Scale<kTwo>(Pair0(h), s);
  o[3] = Scale<kTwo>(Pair1(h), s);
}

__device__ __forceinline__ uint32_t Prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

// A warp's pipeline stage in shared memory: each lane's 16 bytes of row g,
// of row g + 8, and the 4-byte scale word of each row (the chunk's four E8M0
// blocks; lane c uses byte c). Lane-contiguous, so the reads are
// conflict-free; each lane reads back only what it copied itself, so a
// lane's own cp.async wait is the only synchronisation.
constexpr int kStageBytes = 32 * (16 + 16 + 4 + 4);
constexpr int kSmemBytes = kWarps * kStages * kStageBytes;

// 16 bytes of a weight row into shared memory, bypassing L1, with a 256-byte
// L2 prefetch: the row's next chunks are the next bytes, so DRAM sees long
// bursts and more of the stream is in flight than the stages hold.
__device__ __forceinline__ void CopyWeights(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}

// kTwo: some thread's scale in the chunk needs the second multiply.
template <int kNt, bool kTwo>
__device__ __forceinline__ void ChunkMma(const uint4& w0v, const uint4& w1v, const BlockScale& sc0,
                                         const BlockScale& sc1, const uint4 (&xv)[2][4], float (&acc)[2][4]) {
  const uint32_t w0[4] = {w0v.x, w0v.y, w0v.z, w0v.w};
  const uint32_t w1[4] = {w1v.x, w1v.y, w1v.z, w1v.w};
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    uint32_t a0[4], a1[4];
    DequantWord<kTwo>(w0[q], sc0, a0);
    DequantWord<kTwo>(w1[q], sc1, a1);
#pragma unroll
    for (int t = 0; t < kNt; ++t) {
      // x elements 8q .. 8q + 7 of the thread's 32, paired as the nibbles.
      const uint4 x = xv[t][q];
      MmaBf16(acc[t], a0[0], a1[0], a0[1], a1[1], Prmt(x.x, x.z, 0x5410), Prmt(x.x, x.z, 0x7632));
      MmaBf16(acc[t], a0[2], a1[2], a0[3], a1[3], Prmt(x.y, x.w, 0x5410), Prmt(x.y, x.w, 0x7632));
    }
  }
}

// The K loop of one warp over kNt n8 tiles: chunks stream into the warp's
// kStages shared-memory stages by cp.async (no registers held by data in
// flight). Whether some block scale of a chunk needs the two-multiply
// dequantization is decided per chunk by a warp vote, so the common case
// issues one multiply per pair.
template <int kNt>
__device__ __forceinline__ void StreamK(uint8_t* wsm, const uint8_t* w0p, const uint8_t* w1p, const uint8_t* s0p,
                                        const uint8_t* s1p, const uint16_t* const (&xrow)[2], int nk, int lane,
                                        float (&acc)[2][4]) {
  const uint32_t base = SmemAddr(wsm);
  auto issue = [&](int kc) {
    if (kc < nk) {
      const uint32_t st = base + (kc % kStages) * kStageBytes;
      CopyWeights(st + lane * 16, w0p + kc * (kChunk / 2));
      CopyWeights(st + 512 + lane * 16, w1p + kc * (kChunk / 2));
      CpAsync4(st + 1024 + lane * 4, s0p + kc * (kChunk / 32), 4);
      CpAsync4(st + 1152 + lane * 4, s1p + kc * (kChunk / 32), 4);
    }
    CpAsyncCommit();  // an empty group past the end keeps the wait counts uniform
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) issue(s);
  const int c = lane & 3;
  for (int kc = 0; kc < nk; ++kc) {
    uint4 xv[2][4];
#pragma unroll
    for (int t = 0; t < kNt; ++t) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        xv[t][q] = xrow[t] != nullptr ? __ldg(reinterpret_cast<const uint4*>(xrow[t] + kc * kChunk) + q)
                                      : make_uint4(0, 0, 0, 0);
      }
    }
    CpAsyncWait<kStages - 2>();
    const uint8_t* st = wsm + (kc % kStages) * kStageBytes;
    const uint4 w0v = *reinterpret_cast<const uint4*>(st + lane * 16);
    const uint4 w1v = *reinterpret_cast<const uint4*>(st + 512 + lane * 16);
    const uint32_t s0 = (*reinterpret_cast<const uint32_t*>(st + 1024 + lane * 4) >> (8 * c)) & 0xFFu;
    const uint32_t s1 = (*reinterpret_cast<const uint32_t*>(st + 1152 + lane * 4) >> (8 * c)) & 0xFFu;
    issue(kc + kStages - 1);  // into the stage chunk kc - 1 left, read before this one's copies were waited on
    const BlockScale sc0 = MakeBlockScale(s0), sc1 = MakeBlockScale(s1);
    if (__all_sync(0xFFFFFFFFu, sc0.one && sc1.one)) {
      ChunkMma<kNt, false>(w0v, w1v, sc0, sc1, xv, acc);
    } else {
      ChunkMma<kNt, true>(w0v, w1v, sc0, sc1, xv, acc);
    }
  }
}

template <int kEpi>
__global__ void __launch_bounds__(kThreads, 5) StreamGemmKernel(const GemmParams p) {
  const int tile = blockIdx.y;
  if (tile >= *p.num_tiles) return;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, c = lane & 3;
  const int unit = blockIdx.x * kWarps + warp;  // 16 weight rows
  constexpr bool kSwiglu = kEpi == kEpiSwiglu;
  if (kSwiglu ? unit * 8 >= p.inter : unit * 16 >= p.nw) return;  // no block barrier below

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

  const int64_t kb = p.k / 2, ks = p.k / 32;
  const uint8_t* wrow0 = p.w + (static_cast<int64_t>(e) * p.nw + r0) * kb + c * 16;
  const uint8_t* wrow1 = p.w + (static_cast<int64_t>(e) * p.nw + r1) * kb + c * 16;
  const uint8_t* srow0 = p.ws + (static_cast<int64_t>(e) * p.nw + r0) * ks;
  const uint8_t* srow1 = p.ws + (static_cast<int64_t>(e) * p.nw + r1) * ks;

  // The B operand's rows of this thread: tile rows g and g + 8 (nullptr: padding).
  const uint16_t* xrow[2];
#pragma unroll
  for (int t = 0; t < 2; ++t) {
    const int r = g + 8 * t;
    const int pair = r < valid ? sorted[r] : -1;
    xrow[t] = pair < 0 ? nullptr : p.a + static_cast<int64_t>(pair / p.a_row_div) * p.k + c * 32;
  }

  float acc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
  const int nk = static_cast<int>(p.k / kChunk);
  const bool two = valid > 8;  // warp-uniform: the second n8 tile holds pairs
  extern __shared__ __align__(16) uint8_t smem[];
  uint8_t* wsm = smem + warp * kStages * kStageBytes;
  if (two) {
    StreamK<2>(wsm, wrow0, wrow1, srow0, srow1, xrow, nk, lane, acc);
  } else {
    StreamK<1>(wsm, wrow0, wrow1, srow0, srow1, xrow, nk, lane, acc);
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

}  // namespace stream

template <int kEpi>
cudaError_t LaunchStreamGemm(const GemmParams& p, int64_t max_tiles, cudaStream_t stream) {
  const int64_t units = kEpi == kEpiSwiglu ? (p.inter + 7) / 8 : (p.nw + 15) / 16;
  return LaunchOverTiles<stream::kThreads, stream::kSmemBytes>(stream::StreamGemmKernel<kEpi>, p,
                                              (units + stream::kWarps - 1) / stream::kWarps, max_tiles, stream);
}

}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM90_MOE_STREAM_GEMM_CUH_
