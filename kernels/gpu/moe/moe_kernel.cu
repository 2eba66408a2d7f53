// MXFP4 mixture-of-experts grouped GEMMs for sm_90 (DESIGN §4).
//
// Routing runs on the GPU: a histogram of the (token, expert) pairs, a block
// scan into per-expert tiles of BM rows, and a scatter of pair ids into those
// tiles (padding rows are -1). The slot of a pair inside its expert's tiles
// depends on atomics, but every output row is computed from its own A row and
// the expert's weights only, so results are bitwise deterministic.
//
// GEMM: one CTA = (column tile of 128 weight rows, one expert row tile). A
// (bf16 activations, rows gathered by pair) and the raw E2M1 nibbles with
// their E8M0 scales stream in by cp.async, three stages deep; each k-tile of
// 128 is dequantized once to bf16 in shared memory (the E2M1 bits placed into
// bf16 bit fields with integer ops, then one or two exact bf16x2 multiplies
// by powers of two for the block scale) and fed to mma.sync
// m16n8k16 with fp32 accumulation; m16 row blocks past the expert's rows are
// skipped, so padding costs no tensor-core work. Epilogues: bf16 per pair, fused SwiGLU
// (gate and up rows of the same intermediate columns sit in the same thread),
// or fp32 per pair for the weighted down projection, whose per-token sum runs
// in a separate kernel in a fixed order (no float atomics).
//
// At many rows per expert the gate/up projection runs on a second kernel,
// MoeGateUpWgmmaKernel (sm_90a wgmma; by default 128 x 256 or 192 x 192
// tiles with 128-byte-swizzled operands; see below).
#include <cub/block/block_scan.cuh>

#include <cmath>
#include <cstdint>

#include "kernels/gpu/arch/sm80/mma.cuh"
#include "kernels/gpu/arch/sm90/wgmma.cuh"
#include "kernels/gpu/common/bf16.cuh"
#include "kernels/gpu/common/fp8.cuh"
#include "kernels/gpu/moe/moe_launch.h"

namespace kernelserve {
namespace cuda_moe {
namespace {

using namespace ::kernelserve::gpu;        // NOLINT: device helpers
using namespace ::kernelserve::gpu::sm80;  // NOLINT
using namespace ::kernelserve::gpu::sm90;  // NOLINT

constexpr int kBN = 128;      // weight rows per CTA
constexpr int kBK = 128;      // K per pipeline stage
constexpr int kAStr = kBK + 8;        // bf16 stride of sA / sB rows (272 B)
constexpr int kRawStr = kBK / 2 + 16; // bytes per raw fp4 row (80: conflict-free)
constexpr int kScanThreads = 1024;
constexpr int kScanItems = 4;         // experts per scan thread: E <= 4096
constexpr int kMaxExperts = kScanThreads * kScanItems;

enum Epi { kEpiBf16 = 0, kEpiSwiglu = 1, kEpiF32 = 2 };

struct GemmParams {
  const uint16_t* a;  // bf16 [rows, K]
  int a_row_div;      // A row of pair p is p / a_row_div
  const uint8_t* w;   // [E, nw, K/2]
  const uint8_t* ws;  // [E, nw, K/32]
  int64_t nw, k;
  int inter;          // swiglu: up rows start at inter; output columns
  const int* sorted;  // [max_tiles * BM] pair ids, -1 padding
  const int* tile_expert;
  const int* tile_rows;  // valid rows of each tile
  const int* num_tiles;
  void* out;
  int64_t out_cols;
  int rounding;
};

template <int BM, int WM, int WN, int kStages>
struct Cfg {
  static constexpr int kThreads = WM * WN * 32;
  static constexpr int kMT = BM / WM / 16;       // m16 tiles per warp
  static constexpr int kNT = kBN / WN / 8;       // n8 tiles per warp
  static constexpr int kSwGroup = kBN / WN / 2;  // swiglu: gate/up rows per half warp tile
  static constexpr int kStageA = BM * kAStr * 2;
  static constexpr int kStageRaw = kBN * kRawStr;
  static constexpr int kStageScale = kBN * 4;
  static constexpr int kStageBytes = kStageA + kStageRaw + kStageScale;
  static constexpr int kSmemB = kBN * kAStr * 2;
  static constexpr int kSmemBytes = kStages * kStageBytes + kSmemB + BM * 8;
};

// Two E2M1 nibbles (low byte of u) -> bf16x2 of value * 2^-126 (exact bit
// placement: exponent and mantissa bits land in bf16's, the one subnormal
// code becomes a bf16 subnormal).
__device__ __forceinline__ uint32_t Fp4PairBits(uint32_t u) {
  const uint32_t v = (u & 0xFFu) * 0x1001u;
  return ((v << 6) & 0x01C001C0u) | ((v << 12) & 0x80008000u);
}

__device__ __forceinline__ uint32_t MulBf16x2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

template <int BM, int WM, int WN, int kStages, int kEpi>
__global__ void __launch_bounds__(Cfg<BM, WM, WN, kStages>::kThreads)
    MoeGemmKernel(const GemmParams p) {
  using C = Cfg<BM, WM, WN, kStages>;
  extern __shared__ __align__(16) uint8_t smem[];
  uint16_t* sB = reinterpret_cast<uint16_t*>(smem + kStages * C::kStageBytes);
  int64_t* sRow = reinterpret_cast<int64_t*>(smem + kStages * C::kStageBytes + C::kSmemB);

  const int tile = blockIdx.y;
  if (tile >= *p.num_tiles) return;
  const int e = p.tile_expert[tile];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int wm = warp / WN, wn = warp % WN;
  const int col_tile = blockIdx.x;
  const int valid_rows = p.tile_rows[tile];

  // Pair id of each row of the tile, and the element offset of its A row.
  for (int r = tid; r < BM; r += C::kThreads) {
    const int pair = p.sorted[tile * BM + r];
    sRow[r] = pair < 0 ? -1 : static_cast<int64_t>(pair / p.a_row_div) * p.k;
  }
  // Weight row of each smem B row (-1: past the matrix, zero-filled).
  auto weight_row = [&](int j) -> int64_t {
    if (kEpi == kEpiSwiglu) {
      const int grp = j / C::kSwGroup;
      const int idx = (grp >> 1) * C::kSwGroup + j % C::kSwGroup;
      const int col = col_tile * (kBN / 2) + idx;
      if (col >= p.inter) return -1;
      return (grp & 1) ? p.inter + col : col;
    }
    const int64_t row = static_cast<int64_t>(col_tile) * kBN + j;
    return row < p.nw ? row : -1;
  };
  __syncthreads();

  const uint8_t* w_e = p.w + static_cast<int64_t>(e) * p.nw * (p.k / 2);
  const uint8_t* s_e = p.ws + static_cast<int64_t>(e) * p.nw * (p.k / 32);
  const int k_tiles = static_cast<int>(p.k / kBK);

  auto issue = [&](int kt) {
    if (kt < k_tiles) {
      uint8_t* st = smem + (kt % kStages) * C::kStageBytes;
      uint16_t* sA = reinterpret_cast<uint16_t*>(st);
      uint8_t* sRaw = st + C::kStageA;
      uint8_t* sScale = sRaw + C::kStageRaw;
      const int64_t k0 = static_cast<int64_t>(kt) * kBK;
      for (int c = tid; c < BM * (kBK / 8); c += C::kThreads) {
        const int r = c / (kBK / 8), ch = c % (kBK / 8);
        const int64_t off = sRow[r];
        CpAsync16(SmemAddr(sA + r * kAStr + ch * 8), off >= 0 ? p.a + off + k0 + ch * 8 : p.a,
                  off >= 0 ? 16 : 0);
      }
      for (int c = tid; c < kBN * (kBK / 32); c += C::kThreads) {
        const int j = c % kBN, ch = c / kBN;
        const int64_t row = weight_row(j);
        CpAsync16(SmemAddr(sRaw + j * kRawStr + ch * 16),
                  row >= 0 ? w_e + row * (p.k / 2) + k0 / 2 + ch * 16 : w_e, row >= 0 ? 16 : 0);
        if (ch == 0) {
          const uint8_t* src = row >= 0 ? s_e + row * (p.k / 32) + k0 / 32 : s_e;
          asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(SmemAddr(sScale + j * 4)),
                       "l"(src), "r"(row >= 0 ? 4 : 0));
        }
      }
    }
    CpAsyncCommit();  // an empty group past the end keeps the wait counts uniform
  };

  float acc[C::kMT][C::kNT][4];
#pragma unroll
  for (int i = 0; i < C::kMT; ++i) {
#pragma unroll
    for (int j = 0; j < C::kNT; ++j) {
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.f;
    }
  }

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) issue(s);
  for (int kt = 0; kt < k_tiles; ++kt) {
    CpAsyncWait<kStages - 2>();
    __syncthreads();  // stage kt landed; the previous k-tile's mma is done with sB
    {
      const uint8_t* st = smem + (kt % kStages) * C::kStageBytes;
      const uint8_t* sRaw = st + C::kStageA;
      const uint8_t* sScale = sRaw + C::kStageRaw;
      for (int c = tid; c < kBN * (kBK / 32); c += C::kThreads) {
        const int j = c % kBN, blk = c / kBN;
        const uint4 raw = *reinterpret_cast<const uint4*>(sRaw + j * kRawStr + blk * 16);
        const uint32_t sc = sScale[j * 4 + blk];
        // value = bits * 2^126 * 2^(sc-127) = bits * 2^(sc-1): one multiply
        // when 2^(sc-1) is a normal bf16, else two (2^126, then 2^(sc-127);
        // sc = 0 is the subnormal 2^-127, sc = 255 NaN).
        const bool one = sc >= 1 && sc <= 128;
        const uint32_t f1 = one ? ((sc + 126u) << 7) * 0x10001u : 0x7E807E80u;
        const uint32_t f2 = sc == 255 ? 0x7FC07FC0u : (sc == 0 ? 0x00400040u : (sc << 7) * 0x10001u);
        const uint32_t w4[4] = {raw.x, raw.y, raw.z, raw.w};
        uint32_t o[16];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
#pragma unroll
          for (int b = 0; b < 4; ++b) {
            uint32_t v = MulBf16x2(Fp4PairBits(w4[q] >> (8 * b)), f1);
            if (!one) v = MulBf16x2(v, f2);
            o[q * 4 + b] = v;
          }
        }
        uint4* dst = reinterpret_cast<uint4*>(sB + j * kAStr + blk * 32);
        dst[0] = make_uint4(o[0], o[1], o[2], o[3]);
        dst[1] = make_uint4(o[4], o[5], o[6], o[7]);
        dst[2] = make_uint4(o[8], o[9], o[10], o[11]);
        dst[3] = make_uint4(o[12], o[13], o[14], o[15]);
      }
    }
    __syncthreads();           // sB ready
    issue(kt + kStages - 1);   // into the stage the previous k-tile used

    const uint16_t* sA = reinterpret_cast<const uint16_t*>(smem + (kt % kStages) * C::kStageBytes);
    const uint32_t a_base = SmemAddr(sA + (wm * C::kMT * 16 + (lane & 15)) * kAStr + (lane >> 4) * 8);
    const uint32_t b_base =
        SmemAddr(sB + (wn * C::kNT * 8 + (lane >> 4) * 8 + (lane & 7)) * kAStr + ((lane >> 3) & 1) * 8);
#pragma unroll
    for (int ks = 0; ks < kBK / 16; ++ks) {
      uint32_t a[C::kMT][4];
#pragma unroll
      for (int mt = 0; mt < C::kMT; ++mt) {
        if (wm * C::kMT * 16 + mt * 16 >= valid_rows) continue;
        LdMatrixX4(a_base + (mt * 16 * kAStr + ks * 16) * 2, a[mt][0], a[mt][1], a[mt][2], a[mt][3]);
      }
#pragma unroll
      for (int np = 0; np < C::kNT / 2; ++np) {
        uint32_t b0, b1, b2, b3;
        LdMatrixX4(b_base + (np * 16 * kAStr + ks * 16) * 2, b0, b1, b2, b3);
#pragma unroll
        for (int mt = 0; mt < C::kMT; ++mt) {
          if (wm * C::kMT * 16 + mt * 16 >= valid_rows) continue;  // padding rows only
          MmaBf16(acc[mt][2 * np], a[mt][0], a[mt][1], a[mt][2], a[mt][3], b0, b1);
          MmaBf16(acc[mt][2 * np + 1], a[mt][0], a[mt][1], a[mt][2], a[mt][3], b2, b3);
        }
      }
    }
  }

  // Epilogue.
#pragma unroll
  for (int mt = 0; mt < C::kMT; ++mt) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int r = wm * C::kMT * 16 + mt * 16 + hf * 8 + (lane >> 2);
      const int pair = p.sorted[tile * BM + r];
      if (pair < 0) continue;
      if (kEpi == kEpiSwiglu) {
        uint16_t* o = static_cast<uint16_t*>(p.out) + static_cast<int64_t>(pair) * p.out_cols;
#pragma unroll
        for (int nt = 0; nt < C::kNT / 2; ++nt) {
          const int col = col_tile * (kBN / 2) + wn * C::kSwGroup + nt * 8 + (lane & 3) * 2;
          if (col >= p.inter) continue;
          float v[2];
#pragma unroll
          for (int q = 0; q < 2; ++q) {
            const float g = acc[mt][nt][hf * 2 + q], u = acc[mt][nt + C::kNT / 2][hf * 2 + q];
            v[q] = g / (1.f + expf(-g)) * u;
          }
          *reinterpret_cast<uint32_t*>(o + col) = PackBf16x2(v[0], v[1], p.rounding);
        }
      } else {
#pragma unroll
        for (int nt = 0; nt < C::kNT; ++nt) {
          const int64_t col = static_cast<int64_t>(col_tile) * kBN + wn * C::kNT * 8 + nt * 8 + (lane & 3) * 2;
          if (col >= p.nw) continue;
          const float v0 = acc[mt][nt][hf * 2], v1 = acc[mt][nt][hf * 2 + 1];
          if (kEpi == kEpiF32) {
            *reinterpret_cast<float2*>(static_cast<float*>(p.out) + pair * p.out_cols + col) = make_float2(v0, v1);
          } else {
            *reinterpret_cast<uint32_t*>(static_cast<uint16_t*>(p.out) + pair * p.out_cols + col) =
                PackBf16x2(v0, v1, p.rounding);
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------- wgmma path
// Gate/up on wgmma (sm_90a), for many rows per expert. One CTA = 64 kWgs
// expert rows x kBNw weight rows (with SwiGLU: kBNw/2 gate rows and the
// matching up rows, so the epilogue stays in registers); kWgs warpgroups,
// each 64 rows x kBNw columns (m64nNk16, kBNw/2 fp32 accumulators per
// thread). A (gathered bf16 rows) and the raw MXFP4 weights stream in by
// cp.async, kWgStages deep, in k-tiles of 64; the dequantized bf16 weights
// alternate between two shared buffers, so all threads dequantize k-tile i+1
// while the tensor cores run the asynchronous wgmma of k-tile i (one wgmma
// group kept in flight). Both operands use wgmma's no-swizzle K-major layout:
// 8 rows x 16 bytes per 128-byte core matrix, core matrices along K 128 bytes
// apart, 8-row groups 1024 bytes apart (kWgBK = 64).
// Configs: <2, 256> (128 x 256 tiles, x rows read by 3 column tiles) and
// <4, 128> (256 x 128: a quarter of the dequantization per tensor-core op).
// kSw: the same kernel with both operands in the 128-byte-swizzled K-major
// layout (row r of 64 bf16 = 128 bytes at 128 r, its 16-byte chunk c at
// chunk c ^ (r & 7); the layout the attention kernel's wgmma reads), the
// base aligned to 1024 bytes; chosen by Gemm::kWgmmaSw.
constexpr int kWgBK = 64, kWgStages = 4;
constexpr int kWgRawStr = 48;  // bytes per raw fp4 row (32 + 16)

template <int kWgs, int kBNw, bool kSw = false>
struct WgCfg {
  static constexpr int kBM = 64 * kWgs;
  static constexpr int kThreads = 128 * kWgs;
  static constexpr int kAcc = kBNw / 2;
  static constexpr int kStageA = kBM * kWgBK * 2;
  static constexpr int kStageRaw = kBNw * kWgRawStr;
  static constexpr int kStageScale = kBNw * 4;  // the 4 scales of the 128-wide K window holding the k-tile
  // Swizzled stages start on 1024-byte boundaries (a no-op but for 192 columns).
  static constexpr int kStageAlign = kSw ? 1024 : 128;
  static constexpr int kStageBytes =
      (kStageA + kStageRaw + kStageScale + kStageAlign - 1) / kStageAlign * kStageAlign;
  static constexpr int kSB = kBNw * kWgBK * 2;
  static constexpr int kSmemBytes = kWgStages * kStageBytes + 2 * kSB;
  static constexpr int kSmemBytesSw = kSmemBytes + 1024;  // slack to align the base to 1024
  static constexpr int kRawChunks = kBNw * 2;          // 16-byte raw chunks per stage
  static constexpr int kItems = kBNw * 4;              // dequant items (16 elements) per k-tile
  static constexpr int kItemsPerThread = kItems / kThreads;
  static_assert(kSB % kStageAlign == 0, "dequantized-buffer alignment");
  static_assert(kItems % kThreads == 0, "dequant split");
  static_assert(kSmemBytesSw <= 227 * 1024, "shared memory");
};

// D(64xN fp32) += A(64x16 bf16, K-major smem) * B(16xN bf16, K-major smem),
// operands as the descriptors say (WgOperandDesc); N = 256, 192 or 128.
template <int kAcc>
__device__ __forceinline__ void WgmmaK16Bf16(float (&d)[kAcc], uint64_t da, uint64_t db) {
  WgmmaSS<2 * kAcc, Bf16>(d, da, db, 1);
}

// Byte offset of (row r, 16-byte K chunk c) in a [rows x 64] bf16 tile:
// no swizzle (core matrices), or 128-byte swizzle.
template <bool kSw>
__device__ __forceinline__ uint32_t WgCoreOffset(int r, int c) {
  if (kSw) return static_cast<uint32_t>(r * 128 + ((c ^ (r & 7)) << 4));
  return static_cast<uint32_t>((r >> 3) * 1024 + c * 128 + (r & 7) * 16);
}

// Descriptor of a K-major [rows x 64] bf16 operand (8-row groups 1024 apart).
template <bool kSw>
__device__ __forceinline__ uint64_t WgOperandDesc(uint32_t addr) {
  return kSw ? MakeSmemDesc(addr, 16, 1024) : MakeSmemDescInterleave(addr, 128, 1024);
}

template <int kWgs, int kBNw, int kEpi, bool kSw>
__global__ void __launch_bounds__(WgCfg<kWgs, kBNw, kSw>::kThreads, 1) MoeGateUpWgmmaKernel(const GemmParams p) {
  using C = WgCfg<kWgs, kBNw, kSw>;
  extern __shared__ __align__(128) uint8_t smem_raw[];
  uint8_t* smem = smem_raw;
  if (kSw) smem += (1024u - (SmemAddr(smem_raw) & 1023u)) & 1023u;
  uint8_t* sB = smem + kWgStages * C::kStageBytes;

  const int tile = blockIdx.y;
  if (tile >= *p.num_tiles) return;
  const int e = p.tile_expert[tile];
  const int tid = threadIdx.x, wg = tid >> 7;
  const int col_tile = blockIdx.x;
  const int valid_rows = p.tile_rows[tile];
  const bool active = wg * 64 < valid_rows;  // this warpgroup holds real rows
  const int k_tiles = static_cast<int>(p.k / kWgBK);

  // Fixed per thread across k-tiles: the A rows it copies (chunk c = tid +
  // kThreads i lands at byte 16 c of the stage) and the weight rows it copies.
  int64_t a_off[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int c = tid + i * C::kThreads;
    const int r = ((c >> 6) << 3) + (c & 7);
    const int pair = p.sorted[tile * C::kBM + r];
    a_off[i] = pair < 0 ? -1 : static_cast<int64_t>(pair / p.a_row_div) * p.k + ((c >> 3) & 7) * 8;
  }
  const uint8_t* w_e = p.w + static_cast<int64_t>(e) * p.nw * (p.k / 2);
  const uint8_t* s_e = p.ws + static_cast<int64_t>(e) * p.nw * (p.k / 32);
  constexpr int kRawPer = (C::kRawChunks + C::kThreads - 1) / C::kThreads;
  int64_t w_row[kRawPer];
#pragma unroll
  for (int i = 0; i < kRawPer; ++i) {
    const int j = ((tid + i * C::kThreads) >> 1) % kBNw;
    int64_t row;
    if (kEpi == kEpiSwiglu) {
      const int col = col_tile * (kBNw / 2) + j % (kBNw / 2);
      row = col >= p.inter ? -1 : (j >= kBNw / 2 ? p.inter + col : col);
    } else {
      row = static_cast<int64_t>(col_tile) * kBNw + j;
      if (row >= p.nw) row = -1;
    }
    w_row[i] = row;
  }

  auto issue = [&](int kt) {
    if (kt < k_tiles) {
      uint8_t* st = smem + (kt % kWgStages) * C::kStageBytes;
      uint8_t* sRaw = st + C::kStageA;
      uint8_t* sScale = sRaw + C::kStageRaw;
      const int64_t k0 = static_cast<int64_t>(kt) * kWgBK;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int c = tid + i * C::kThreads;
        // Chunk c is (row ((c >> 6) << 3) + (c & 7), K chunk (c >> 3) & 7): byte 16 c without swizzle.
        const uint32_t dst = kSw ? WgCoreOffset<true>(((c >> 6) << 3) + (c & 7), (c >> 3) & 7) : c * 16;
        CpAsync16(SmemAddr(st + dst), a_off[i] >= 0 ? p.a + a_off[i] + k0 : p.a, a_off[i] >= 0 ? 16 : 0);
      }
#pragma unroll
      for (int i = 0; i < kRawPer; ++i) {
        const int c = tid + i * C::kThreads;
        if (c < C::kRawChunks) {
          const int j = c >> 1, ch = c & 1;
          const int64_t row = w_row[i];
          CpAsync16(SmemAddr(sRaw + j * kWgRawStr + ch * 16),
                    row >= 0 ? w_e + row * (p.k / 2) + k0 / 2 + ch * 16 : w_e, row >= 0 ? 16 : 0);
          if (ch == 0) {
            const uint8_t* src = row >= 0 ? s_e + row * (p.k / 32) + (k0 / 128) * 4 : s_e;
            asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(SmemAddr(sScale + j * 4)),
                         "l"(src), "r"(row >= 0 ? 4 : 0));
          }
        }
      }
    }
    CpAsyncCommit();  // an empty group past the end keeps the wait counts uniform
  };

  // k-tile kt's raw weights -> bf16 in sB[kt & 1] (exact; see MoeGemmKernel).
  // Item = 16 elements (8 raw bytes) of one weight row.
  auto dequant = [&](int kt) {
    const uint8_t* st = smem + (kt % kWgStages) * C::kStageBytes;
    const uint8_t* sRaw = st + C::kStageA;
    const uint8_t* sScale = sRaw + C::kStageRaw;
    uint8_t* dstb = sB + (kt & 1) * C::kSB;
#pragma unroll
    for (int i = 0; i < C::kItemsPerThread; ++i) {
      const int item = tid + i * C::kThreads;
      const int j = item % kBNw, hb = item / kBNw;  // hb: 16-element quarter of the k-tile
      const uint2 raw = *reinterpret_cast<const uint2*>(sRaw + j * kWgRawStr + hb * 8);
      const uint32_t sc = sScale[j * 4 + (kt & 1) * 2 + (hb >> 1)];
      const bool one = sc >= 1 && sc <= 128;
      const uint32_t f1 = one ? ((sc + 126u) << 7) * 0x10001u : 0x7E807E80u;
      const uint32_t f2 = sc == 255 ? 0x7FC07FC0u : (sc == 0 ? 0x00400040u : (sc << 7) * 0x10001u);
      const uint32_t w2[2] = {raw.x, raw.y};
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        uint32_t o[4];
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          uint32_t v = MulBf16x2(Fp4PairBits(w2[q] >> (8 * b)), f1);
          if (!one) v = MulBf16x2(v, f2);
          o[b] = v;
        }
        *reinterpret_cast<uint4*>(dstb + WgCoreOffset<kSw>(j, hb * 2 + q)) = make_uint4(o[0], o[1], o[2], o[3]);
      }
    }
  };

  float acc[C::kAcc];
#pragma unroll
  for (int i = 0; i < C::kAcc; ++i) acc[i] = 0.f;

#pragma unroll
  for (int s = 0; s < kWgStages - 1; ++s) issue(s);
  CpAsyncWait<kWgStages - 2>();
  FenceProxyAsync();
  __syncthreads();
  dequant(0);
  FenceProxyAsync();
  __syncthreads();

  const uint32_t smem_base = SmemAddr(smem);
  for (int kt = 0; kt < k_tiles; ++kt) {
    // sB[kt & 1] and stage kt's A are ready and visible to the async proxy.
    // Issued by every warpgroup, also over padding rows: a wgmma under a
    // per-warpgroup branch makes ptxas serialize all of them (C7520).
    {
      const uint32_t a_addr = smem_base + (kt % kWgStages) * C::kStageBytes + wg * 8 * 1024;
      const uint32_t b_addr = smem_base + kWgStages * C::kStageBytes + (kt & 1) * C::kSB;
      const uint64_t da = WgOperandDesc<kSw>(a_addr), db = WgOperandDesc<kSw>(b_addr);
      // A k-step of 16 is 32 bytes along the swizzled row, 256 (two core matrices) without.
      constexpr uint64_t kStep = (kSw ? 32 : 256) >> 4;
      FenceOperand(acc);
      WgmmaFence();
#pragma unroll
      for (int ks = 0; ks < kWgBK / 16; ++ks) WgmmaK16Bf16(acc, da + ks * kStep, db + ks * kStep);
    }
    WgmmaCommit();
    FenceOperand(acc);
    CpAsyncWait<kWgStages - 3>();  // this thread's copies of k-tile kt + 1
    WgmmaWait<1>();                // this warpgroup's k-tile kt - 1
    FenceProxyAsync();
    __syncthreads();  // every warpgroup is done with sB[(kt+1)&1] and stage kt-1; kt+1 landed
    issue(kt + kWgStages - 1);  // into stage (kt - 1) % kWgStages
    if (kt + 1 < k_tiles) {
      dequant(kt + 1);  // overlaps the wgmma of k-tile kt
      FenceProxyAsync();
    }
    __syncthreads();
  }
  WgmmaWait<0>();
  FenceOperand(acc);

  // Accumulator layout of m64nN: row 16 w + lane/4 + 8 h, column 8 j + 2 (lane%4) + c
  // in register 4 j + 2 h + c (w = warp within the warpgroup).
  if (!active) return;
  const int warp = (tid >> 5) & 3, lane = tid & 31;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = wg * 64 + warp * 16 + (lane >> 2) + 8 * h;
    const int pair = p.sorted[tile * C::kBM + r];
    if (pair < 0) continue;
    uint16_t* o = static_cast<uint16_t*>(p.out) + static_cast<int64_t>(pair) * p.out_cols;
    if (kEpi == kEpiSwiglu) {
#pragma unroll
      for (int j = 0; j < kBNw / 16; ++j) {
        const int col = col_tile * (kBNw / 2) + 8 * j + 2 * (lane & 3);
        if (col >= p.inter) continue;
        float v[2];
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const float g = acc[4 * j + 2 * h + c], u = acc[4 * (j + kBNw / 16) + 2 * h + c];
          v[c] = g / (1.f + expf(-g)) * u;
        }
        *reinterpret_cast<uint32_t*>(o + col) = PackBf16x2(v[0], v[1], p.rounding);
      }
    } else {
#pragma unroll
      for (int j = 0; j < kBNw / 8; ++j) {
        const int64_t col = static_cast<int64_t>(col_tile) * kBNw + 8 * j + 2 * (lane & 3);
        if (col >= p.nw) continue;
        *reinterpret_cast<uint32_t*>(o + col) = PackBf16x2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1], p.rounding);
      }
    }
  }
}

template <int kWgs, int kBNw, int kEpi, bool kSw>
cudaError_t LaunchGateUpWgmmaCfg(const GemmParams& p, int64_t max_tiles, cudaStream_t stream) {
  using C = WgCfg<kWgs, kBNw, kSw>;
  const auto kernel = MoeGateUpWgmmaKernel<kWgs, kBNw, kEpi, kSw>;
  constexpr int kSmem = kSw ? C::kSmemBytesSw : C::kSmemBytes;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (e != cudaSuccess) return e;
  const int64_t col_tiles = kEpi == kEpiSwiglu ? (p.inter + kBNw / 2 - 1) / (kBNw / 2) : (p.nw + kBNw - 1) / kBNw;
  kernel<<<dim3(static_cast<unsigned>(col_tiles), static_cast<unsigned>(max_tiles)), C::kThreads, kSmem,
           stream>>>(p);
  return cudaGetLastError();
}

// bm = 128: <2 warpgroups, 256 columns>; bm = 192: <3 warpgroups, 192
// columns>; bm = 256: <4 warpgroups, 128 columns>. sw: swizzled operands
// (128 and 192 rows).
template <int kEpi>
cudaError_t LaunchGateUpWgmma(int bm, bool sw, const GemmParams& p, int64_t max_tiles, cudaStream_t stream) {
  if (bm == 256) return LaunchGateUpWgmmaCfg<4, 128, kEpi, false>(p, max_tiles, stream);
  if (bm == 192) {
    return sw ? LaunchGateUpWgmmaCfg<3, 192, kEpi, true>(p, max_tiles, stream)
              : LaunchGateUpWgmmaCfg<3, 192, kEpi, false>(p, max_tiles, stream);
  }
  return sw ? LaunchGateUpWgmmaCfg<2, 256, kEpi, true>(p, max_tiles, stream)
            : LaunchGateUpWgmmaCfg<2, 256, kEpi, false>(p, max_tiles, stream);
}

__global__ void MoeCountKernel(const int32_t* ids, int64_t pairs, int* counts) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < pairs;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    atomicAdd(&counts[ids[i]], 1);
  }
}

// One block: tiles per expert, their exclusive prefix, the expert of each tile.
__global__ void __launch_bounds__(kScanThreads) MoeScanKernel(const int* counts, int experts, int bm,
                                                              int* tile_start, int* tile_expert,
                                                              int* tile_rows, int* num_tiles) {
  using Scan = cub::BlockScan<int, kScanThreads>;
  __shared__ typename Scan::TempStorage temp;
  int tiles[kScanItems], start[kScanItems];
#pragma unroll
  for (int i = 0; i < kScanItems; ++i) {
    const int e = threadIdx.x * kScanItems + i;
    tiles[i] = e < experts ? (counts[e] + bm - 1) / bm : 0;
  }
  int total;
  Scan(temp).ExclusiveSum(tiles, start, total);
#pragma unroll
  for (int i = 0; i < kScanItems; ++i) {
    const int e = threadIdx.x * kScanItems + i;
    if (e >= experts) continue;
    tile_start[e] = start[i];
    for (int t = 0; t < tiles[i]; ++t) {
      tile_expert[start[i] + t] = e;
      tile_rows[start[i] + t] = min(bm, counts[e] - t * bm);
    }
  }
  if (threadIdx.x == 0) *num_tiles = total;
}

__global__ void MoeScatterKernel(const int32_t* ids, int64_t pairs, const int* tile_start, int* cursor,
                                 int bm, int* sorted) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < pairs;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int e = ids[i];
    const int slot = atomicAdd(&cursor[e], 1);
    sorted[tile_start[e] * bm + slot] = static_cast<int>(i);
  }
}

// out[t, n] = sum_r w[t, r] * y[t*top_k + r, n], r in order.
__global__ void MoeWeightedSumKernel(const float* y, const float* w, int top_k, int64_t n, uint16_t* out,
                                     int rounding) {
  const int64_t t = blockIdx.x;
  for (int64_t c = 2 * threadIdx.x; c < n; c += 2 * blockDim.x) {
    float s0 = 0.f, s1 = 0.f;
    for (int r = 0; r < top_k; ++r) {
      const float wt = w[t * top_k + r];
      const float2 v = *reinterpret_cast<const float2*>(y + (t * top_k + r) * n + c);
      s0 = fmaf(wt, v.x, s0);
      s1 = fmaf(wt, v.y, s1);
    }
    *reinterpret_cast<uint32_t*>(out + t * n + c) = PackBf16x2(s0, s1, rounding);
  }
}

struct Routing {
  int* sorted = nullptr;
  int* tile_expert = nullptr;
  int* num_tiles = nullptr;
  int64_t max_tiles = 0;
};

template <int BM, int WM, int WN, int kStages, int kEpi>
cudaError_t LaunchGemm(const GemmParams& p, int64_t col_tiles, int64_t max_tiles, cudaStream_t stream) {
  using C = Cfg<BM, WM, WN, kStages>;
  const auto kernel = MoeGemmKernel<BM, WM, WN, kStages, kEpi>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes);
  if (e != cudaSuccess) return e;
  kernel<<<dim3(static_cast<unsigned>(col_tiles), static_cast<unsigned>(max_tiles)), C::kThreads, C::kSmemBytes,
           stream>>>(p);
  return cudaGetLastError();
}

template <int kEpi>
cudaError_t LaunchGemmTile(int bm, const GemmParams& p, int64_t col_tiles, int64_t max_tiles, cudaStream_t s) {
  switch (bm) {
    case 16:  // 3 CTAs per SM
      return LaunchGemm<16, 1, 4, 3, kEpi>(p, col_tiles, max_tiles, s);
    case 64:  // 2 CTAs per SM
      return LaunchGemm<64, 2, 4, 2, kEpi>(p, col_tiles, max_tiles, s);
    default:
      return LaunchGemm<128, 4, 2, 3, kEpi>(p, col_tiles, max_tiles, s);
  }
}

double RowsPerExpert(const MoeArgs& a) {
  const int64_t pairs = a.tokens * a.top_k;
  const int64_t active = pairs < a.experts ? pairs : a.experts;
  return static_cast<double>(pairs) / static_cast<double>(active);
}

// Row tile of the wgmma gate/up kernel (128 or 256), or 0: mma.sync.
int WgmmaRows(const MoeArgs& a) {
  if (a.stage == Stage::kDown || a.gemm == Gemm::kMmaSync) return 0;
  if (a.gemm == Gemm::kWgmma || a.gemm == Gemm::kWgmmaSw) return 128;
  if (a.gemm == Gemm::kWgmmaTall) return 256;
  if (a.gemm == Gemm::kWgmmaWide || a.gemm == Gemm::kWgmmaWideSw) return 192;
  // Auto: only the projection alone, with no tile forced, at many rows per
  // expert (at ~1 row per expert, T = 8 or 32, mma.sync stays faster), on
  // swizzled operands, in whichever tiling launches fewer CTAs per expert
  // (ties: 128 x 256). Measured on the H200 (bench/NOTES.md, Kimi shard): a
  // CTA of either swizzled tiling costs about the same (0.68-0.77 us of the
  // whole grid per CTA at 73, 146 and 292 rows per expert), so the count
  // decides: 73 rows -> 128 x 256 (3 CTAs vs 4), 146 -> 192 x 192 (6 vs 4),
  // 292 -> 192 x 192 (9 vs 8), each the faster one there.
  if (a.stage != Stage::kGateUp || a.tile != Tile::kAuto) return 0;
  const double rows = RowsPerExpert(a);
  if (rows < 72) return 0;
  const int64_t nw = 2 * a.inter;  // weight rows; SwiGLU pairs them, same count
  const double ctas128 = std::ceil(rows / 128) * static_cast<double>((nw + 255) / 256);
  const double ctas192 = std::ceil(rows / 192) * static_cast<double>((nw + 191) / 192);
  return ctas192 < ctas128 ? 192 : 128;
}

// Whether the wgmma kernel reads 128-byte-swizzled operands.
bool WgmmaSwizzled(const MoeArgs& a) {
  return a.gemm == Gemm::kWgmmaSw || a.gemm == Gemm::kWgmmaWideSw || a.gemm == Gemm::kAuto;
}

int ChooseTile(const MoeArgs& a) {
  if (const int wm = WgmmaRows(a)) return wm;
  if (a.tile != Tile::kAuto) return static_cast<int>(a.tile);
  const double rows_per_expert = RowsPerExpert(a);
  if (rows_per_expert < 12) return 16;
  if (rows_per_expert < 256) return 64;
  return 128;
}

}  // namespace

Gemm AutoGemm(const MoeArgs& a) {
  MoeArgs as_auto = a;
  as_auto.gemm = Gemm::kAuto;
  const int rows = WgmmaRows(as_auto);
  return rows == 192 ? Gemm::kWgmmaWideSw : rows == 128 ? Gemm::kWgmmaSw : Gemm::kMmaSync;
}

const char* MoeUnsupported(const MoeArgs& a) {
  // A layer's down half runs on the mma.sync kernel, which has no 192- or 256-row tile.
  if (a.gemm == Gemm::kWgmmaTall && a.stage != Stage::kGateUp) {
    return "moe: the 256-row wgmma tiling serves the gate/up projection alone";
  }
  if ((a.gemm == Gemm::kWgmmaWide || a.gemm == Gemm::kWgmmaWideSw) && a.stage != Stage::kGateUp) {
    return "moe: the 192-row wgmma tiling serves the gate/up projection alone";
  }
  if (a.experts > kMaxExperts) return "moe: the cuda backend serves at most 4096 experts";
  if (a.stage != Stage::kDown && a.hidden % kBK != 0) return "moe: the cuda backend needs K (hidden) % 128 == 0";
  if (a.stage != Stage::kGateUp && a.inter % kBK != 0) return "moe: the cuda backend needs I % 128 == 0 for down";
  if (a.stage != Stage::kGateUp && a.out_dim % 2 != 0) return "moe: the cuda backend needs an even N";
  if (a.inter % 2 != 0) return "moe: the cuda backend needs an even I";
  if (a.tokens * a.top_k >= (int64_t{1} << 31) / 128) return "moe: too many (token, expert) pairs";
  return nullptr;
}

cudaError_t LaunchMoe(const MoeArgs& a, cudaStream_t stream) {
  const int64_t pairs = a.tokens * a.top_k;
  const int bm = ChooseTile(a);
  const int64_t max_tiles = (pairs + bm - 1) / bm + (pairs < a.experts ? pairs : a.experts);
  const int64_t E = a.experts;
  const bool need_y = a.stage == Stage::kLayer || (a.stage == Stage::kDown && a.weighted);
  const bool need_h = a.stage == Stage::kLayer;

  // Workspace: counts, cursor, tile_start [E]; tile_expert [max_tiles]; num_tiles;
  // sorted [max_tiles*bm]; then the layer intermediate (bf16) and y (fp32).
  auto align = [](size_t x) { return (x + 255) & ~size_t{255}; };
  const size_t ints = 3 * E + 2 * max_tiles + 1;
  size_t off_sorted = align(ints * 4);
  size_t off_h = align(off_sorted + static_cast<size_t>(max_tiles) * bm * 4);
  size_t off_y = align(off_h + (need_h ? static_cast<size_t>(pairs) * a.inter * 2 : 0));
  size_t total = off_y + (need_y ? static_cast<size_t>(pairs) * a.out_dim * 4 : 0);
  uint8_t* ws = nullptr;
  cudaError_t e = cudaMallocAsync(reinterpret_cast<void**>(&ws), total, stream);
  if (e != cudaSuccess) return e;
  int* counts = reinterpret_cast<int*>(ws);
  int* cursor = counts + E;
  int* tile_start = cursor + E;
  int* tile_expert = tile_start + E;
  int* tile_rows = tile_expert + max_tiles;
  int* num_tiles = tile_rows + max_tiles;
  int* sorted = reinterpret_cast<int*>(ws + off_sorted);
  uint16_t* h = reinterpret_cast<uint16_t*>(ws + off_h);
  float* y = reinterpret_cast<float*>(ws + off_y);

  auto run = [&]() -> cudaError_t {
    cudaError_t r;
    if ((r = cudaMemsetAsync(counts, 0, 2 * E * 4, stream)) != cudaSuccess) return r;
    if ((r = cudaMemsetAsync(sorted, 0xFF, static_cast<size_t>(max_tiles) * bm * 4, stream)) != cudaSuccess) return r;
    const int blocks = static_cast<int>(std::min<int64_t>((pairs + 255) / 256, 1024));
    MoeCountKernel<<<blocks, 256, 0, stream>>>(a.topk_ids, pairs, counts);
    MoeScanKernel<<<1, kScanThreads, 0, stream>>>(counts, static_cast<int>(E), bm, tile_start, tile_expert,
                                                  tile_rows, num_tiles);
    MoeScatterKernel<<<blocks, 256, 0, stream>>>(a.topk_ids, pairs, tile_start, cursor, bm, sorted);
    if ((r = cudaGetLastError()) != cudaSuccess) return r;

    GemmParams g{};
    g.sorted = sorted;
    g.tile_expert = tile_expert;
    g.tile_rows = tile_rows;
    g.num_tiles = num_tiles;
    g.rounding = a.rounding;
    if (a.stage == Stage::kGateUp || a.stage == Stage::kLayer) {
      const bool sw = a.swiglu || a.stage == Stage::kLayer;
      g.a = static_cast<const uint16_t*>(a.x);
      g.a_row_div = static_cast<int>(a.top_k);
      g.w = a.w13;
      g.ws = a.w13_scales;
      g.nw = 2 * a.inter;
      g.k = a.hidden;
      g.inter = static_cast<int>(a.inter);
      g.out = a.stage == Stage::kLayer ? static_cast<void*>(h) : a.out;
      g.out_cols = sw ? a.inter : 2 * a.inter;
      if (a.stage == Stage::kLayer) g.rounding = 1;  // the stored intermediate is RTNE bf16
      if (WgmmaRows(a) != 0) {
        r = sw ? LaunchGateUpWgmma<kEpiSwiglu>(bm, WgmmaSwizzled(a), g, max_tiles, stream)
               : LaunchGateUpWgmma<kEpiBf16>(bm, WgmmaSwizzled(a), g, max_tiles, stream);
      } else {
        r = sw ? LaunchGemmTile<kEpiSwiglu>(bm, g, (a.inter + kBN / 2 - 1) / (kBN / 2), max_tiles, stream)
               : LaunchGemmTile<kEpiBf16>(bm, g, (2 * a.inter + kBN - 1) / kBN, max_tiles, stream);
      }
      if (r != cudaSuccess) return r;
    }
    if (a.stage == Stage::kDown || a.stage == Stage::kLayer) {
      g.a = a.stage == Stage::kLayer ? h : static_cast<const uint16_t*>(a.x);
      g.a_row_div = 1;
      g.w = a.w2;
      g.ws = a.w2_scales;
      g.nw = a.out_dim;
      g.k = a.inter;
      g.inter = static_cast<int>(a.inter);
      g.out = need_y ? static_cast<void*>(y) : a.out;
      g.out_cols = a.out_dim;
      g.rounding = a.rounding;
      const int64_t col_tiles = (a.out_dim + kBN - 1) / kBN;
      r = need_y ? LaunchGemmTile<kEpiF32>(bm, g, col_tiles, max_tiles, stream)
                 : LaunchGemmTile<kEpiBf16>(bm, g, col_tiles, max_tiles, stream);
      if (r != cudaSuccess) return r;
      if (need_y) {
        MoeWeightedSumKernel<<<static_cast<unsigned>(a.tokens), 256, 0, stream>>>(
            y, a.topk_weights, static_cast<int>(a.top_k), a.out_dim, static_cast<uint16_t*>(a.out), a.rounding);
        if ((r = cudaGetLastError()) != cudaSuccess) return r;
      }
    }
    return cudaSuccess;
  };
  e = run();
  const cudaError_t f = cudaFreeAsync(ws, stream);
  return e != cudaSuccess ? e : f;
}

}  // namespace cuda_moe
}  // namespace kernelserve
