// Shared by the MLA decode kernels (mla_decode_v4.cu, mla_decode_pipe.cu,
// mla_decode_roles.cu) and their launcher (mla_decode_kernel.cu): the CTA
// shape, the kernel parameters, the shared-memory plans and the device
// helpers (core-matrix layout, fp8 unpack, the 256-thread epilogue).
#ifndef KERNELSERVE_KERNELS_CUDA_MLA_MLA_KERNEL_COMMON_CUH_
#define KERNELSERVE_KERNELS_CUDA_MLA_MLA_KERNEL_COMMON_CUH_

#include <cmath>
#include <cstdint>

#include "kernels/gpu/arch/sm80/mma.cuh"
#include "kernels/gpu/arch/sm90/wgmma.cuh"
#include "kernels/gpu/common/bf16.cuh"
#include "kernels/gpu/common/fp8.cuh"

namespace kernelserve {
namespace cuda_mla {

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
  float* part_o;   // [B][G][splits][64][512] (v8: f16 O / l; v4..v7: fp32 O)
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

constexpr int kPipeTile = kTok * kD * 2;  // one bf16 KV tile, core-tiled: 72 KB
constexpr int kPipeQ = kRows * kD * 2;    // Q, core-tiled: 72 KB
constexpr int kPipeP = kRows * kTok * 2;  // P, core-tiled: 8 KB
constexpr int kSmemBytesPipe = kPipeQ + 2 * kPipeTile + kPipeP + kSmemStats + 2 * kSmemSlots;
static_assert(kSmemBytesPipe <= 227 * 1024, "kWgmmaPipe must fit the sm_90 per-block limit");
// Raw 16-byte chunks per thread per tile: 8 latent (8 rows x 1) + 1 rope.
constexpr int kPipeChunks = kTok * (kD / 16) / kThreads;
static_assert(kPipeChunks == 9, "chunk map below assumes 9 chunks per thread");

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

// kWgmmaRegA (v8, mla_decode_rega.cu): 384 threads; Q (f16) + three fp8 row
// slots of 64 x 608 B + three P^T blocks + the per-column tables + barriers.
constexpr int kThreadsRegA = 384;
constexpr int kSmemBytesRegA = kPipeQ + 3 * kTok * 608 + 3 * kTok * kRows * 2 + 2 * 4 * kRows * 4 +
                               2 * 3 * kRows * 4 + kRows * 4 + 2 * 8 * kRows * 4 + 16 + 6 * 8;

using KernelFn = void (*)(const KParams);
// The instantiations, one getter per kernel file: v4 (kVar 0..3), v6, v7, v8.
KernelFn V4Kernel(bool fnuz, int var);
KernelFn PipeKernel(bool fnuz);
KernelFn RolesKernel(bool fnuz);
KernelFn RegAKernel(bool fnuz);  // null for e4m3fnuz (not covered: v7 runs)

namespace {

using namespace ::kernelserve::gpu;        // NOLINT: device helpers
using namespace ::kernelserve::gpu::sm80;  // NOLINT
using namespace ::kernelserve::gpu::sm90;  // NOLINT

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

// What one CTA of the 256-thread kernels works on: (KV split, group of 64
// query rows, request) from the grid, and that split's token range.
struct CtaWork {
  int split, group, b, ql, n_tiles, row0, nrows, kv_base;
  int64_t seq, tok_begin, tok_end;
};
__device__ __forceinline__ CtaWork GetCtaWork(const KParams& p) {
  CtaWork w;
  w.split = blockIdx.x;
  w.group = blockIdx.y;
  w.b = blockIdx.z;
  w.seq = p.seq_lens ? p.seq_lens[w.b] : p.kv_seq;
  w.ql = p.q_lens ? p.q_lens[w.b] : p.q_len;
  w.tok_begin = static_cast<int64_t>(w.split) * p.chunk;
  w.tok_end = min(w.seq, w.tok_begin + p.chunk);
  w.n_tiles = w.tok_end > w.tok_begin ? static_cast<int>((w.tok_end - w.tok_begin + kTok - 1) / kTok) : 0;
  w.row0 = w.group * kRows;
  w.nrows = min(kRows, p.rows - w.row0);
  w.kv_base = p.paged ? p.kv_indptr[w.b] : 0;
  return w;
}
// Pool row of token j, or -1 past the split's chunk.
__device__ __forceinline__ int64_t SlotOf(const KParams& p, const CtaWork& w, int64_t j) {
  if (j >= w.tok_end) return -1;
  if (!p.paged) return static_cast<int64_t>(w.b) * p.kv_seq + j;
  if (p.page_size == 1) return p.kv_indices[w.kv_base + j];
  return static_cast<int64_t>(p.kv_indices[w.kv_base + j / p.page_size]) * p.page_size + j % p.page_size;
}
// The CTA's 64 query rows (q_lat then q_pe, 576 bf16) into the core-tiled
// layout; rows past nrows are zeros.
__device__ __forceinline__ void LoadQCoreTiled(uint8_t* sQ, const KParams& p, const CtaWork& w, int tid) {
  const uint16_t* qlat = p.q_lat + (static_cast<int64_t>(w.b) * p.rows + w.row0) * kDL;
  const uint16_t* qpe = p.q_pe + (static_cast<int64_t>(w.b) * p.rows + w.row0) * kDR;
  for (int c = tid; c < kRows * (kD / 8); c += kThreads) {
    const int r = c / (kD / 8), col = c % (kD / 8);
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < w.nrows) {
      v = col < kDL / 8 ? reinterpret_cast<const uint4*>(qlat + static_cast<int64_t>(r) * kDL)[col]
                        : reinterpret_cast<const uint4*>(qpe + static_cast<int64_t>(r) * kDR)[col - kDL / 8];
    }
    *reinterpret_cast<uint4*>(sQ + CoreTiled(r, col * 8)) = v;
  }
}

// v4 / v6 softmax, first half: the scores of this thread's two rows and 16
// tokens of warpgroup qk_nh's 32-token half (base 2, scaled, masked past the
// chunk and the causal window), and each row's maximum over that half into
// sMax[qk_nh][row] for the exchange between the two halves.
__device__ __forceinline__ void ScoresAndTileMax(float (&s)[4][4], const KParams& p, int64_t j0, int64_t tok_end,
                                                 const int64_t (&lim_qk)[2], int qk_nh, int qk_mi, int lane,
                                                 float* sMax) {
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
}

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


}  // namespace
}  // namespace cuda_mla
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_CUDA_MLA_MLA_KERNEL_COMMON_CUH_
