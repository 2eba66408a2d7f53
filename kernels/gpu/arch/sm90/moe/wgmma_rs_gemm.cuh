// The wgmma grouped GEMM of the MXFP4 MoE with the weights as the register
// operand (sm_90a), any stage, for many rows per expert; included by its
// instantiation files wgmma_rs_gemm_<epilogue>.cu.
//
// Why the weights go in registers: wgmma's M is 64 rows per warpgroup, but
// its N is any multiple of 8. With the weights as M and the expert's rows
// as N, a tile computes its rows rounded up to 32 instead of to a 64-, 128-
// or 192-row tile (at 146 rows per expert, the 192-row tile's wgmmas are 24 %
// padding; N = 160 is 9 %). And the weights dequantize straight into the A
// fragments: each thread converts the 16 elements it feeds per k-tile while
// the previous k-tile's wgmmas run, with no bf16 copy of the weights in
// shared memory and no barrier between dequantization and MMA.
//
// One CTA = one routing tile (up to kRsRows rows of one expert) x kBW = 128
// weight rows. Warpgroups 0 and 1 consume: 64 weight rows each, the tile's
// rows as N (N = the tile's rows rounded up to 32; a switch picks the
// instantiation, since wgmma's N is an immediate). Warpgroup 2 produces: per
// k-tile of 64 it cp.asyncs the tile's gathered activation rows (wgmma's B,
// 128-byte-swizzled K-major), the weight rows' raw E2M1 bytes and their E8M0
// window into stage kt % kStages and arrives on the stage's `full` mbarrier
// once they land; each consumer warp releases a stage on `empty` when the
// wgmmas that read it are done.
// SwiGLU: each 16-row group of weight rows is 8 gate rows and the 8 up rows
// of the same intermediate columns, so silu(gate) * up meets in one thread.
//
// A CTA walks p.cols_per_cta column tiles of its routing tile: its start
// and its pipeline's fill are paid once per walk, and the producer fills
// the next column tile's stages while the consumers store the last one's
// outputs. With a short K (down: K = I, e.g. 384 = 6 k-tiles) a CTA's work
// is mostly its fill, its prologue and its epilogue, and every column tile
// copies the same activation rows again; there (kResident, p.b_resident)
// the tile's whole B is copied once into shared memory and stays there, and
// only the weights stream through the stages.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM90_MOE_WGMMA_RS_GEMM_CUH_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM90_MOE_WGMMA_RS_GEMM_CUH_

#include <cmath>
#include <cstdint>

#include "kernels/gpu/arch/sm80/mma.cuh"
#include "kernels/gpu/arch/sm90/moe/moe_gemm.h"
#include "kernels/gpu/arch/sm90/moe/moe_gemm_common.cuh"
#include "kernels/gpu/arch/sm90/pipeline.cuh"
#include "kernels/gpu/arch/sm90/wgmma.cuh"
#include "kernels/gpu/common/bf16.cuh"
#include "kernels/gpu/moe/moe_params.h"

namespace kernelserve {
namespace gpu {
namespace moe {
namespace wgmma_rs {

using sm80::CpAsync16Prefetch256;
using sm80::CpAsync4;
using sm80::SmemAddr;

constexpr int kBK = 64;       // K per stage
constexpr int kBN = kRsRows;  // rows of a routing tile
constexpr int kNStep = 32;    // N is the tile's rows rounded up to this
constexpr int kMaxSteps = kBN / kNStep;
// Bytes per weight row per stage: 32 of E2M1 and 16 of padding, so that the
// 16-byte reads of 8 rows by a warp's quads hit 8 distinct bank groups.
constexpr int kRawStr = 48;
constexpr int kRowsPerProducer = kBN / 16;
static_assert(kMaxSteps == 6, "the switch in WgmmaRsGemmKernel covers 1..6 steps");
constexpr int kCons = 2;         // consumer warpgroups
constexpr int kBW = 64 * kCons;  // weight rows per column tile
static_assert(kRsResidentMaxK % kBK == 0, "whole k-tiles of B stay resident");

// The bf16 and fp32 epilogues go through shared memory: each consumer
// warpgroup writes a pass of tile rows x its 64 output columns there, then
// stores whole 16-byte pieces of output rows. Stored straight from the
// accumulators, a warp's store writes 2 bytes per lane into 4 rows (4 half
// sectors) and a 192-row tile takes 96 of them per thread, while the tensor
// pipe waits. A row is padded by 16 bytes so that the 4 rows a warp writes
// at once, two apart, fall in different banks.
template <int kEpi>
struct EpiStage {
  static constexpr int kElem = kEpi == kEpiF32 ? 4 : 2;
  static constexpr int kRowBytes = 64 * kElem;
  static constexpr int kPitch = kRowBytes + 16;
  static constexpr int kRows = kEpi == kEpiF32 ? 32 : 64;  // tile rows per pass
  static constexpr int kChunks = kRowBytes / 16;            // 16-byte pieces per row
  static constexpr int kPerThread = kRows * kChunks / 128;  // pieces per consumer thread and pass
  static_assert(kRows * kChunks % 128 == 0, "whole pieces per thread");
};
constexpr int kEpiStageBytes = 64 * 144;  // per consumer warpgroup: the larger of the two passes
static_assert(EpiStage<kEpiBf16>::kRows * EpiStage<kEpiBf16>::kPitch <= kEpiStageBytes, "bf16 pass");
static_assert(EpiStage<kEpiF32>::kRows * EpiStage<kEpiF32>::kPitch <= kEpiStageBytes, "fp32 pass");

// Two consumer warpgroups of 64 weight rows each and one producer, one CTA
// per SM: the 96 accumulators of a 192-row tile and the double-buffered A
// fragments need 216 registers per consumer thread. kResident: B's k-tiles
// (at most kRsResidentMaxK / kBK) each in a region of their own, the stages
// hold the weights only (so more of them fit).
template <bool kResident>
struct Cfg {
  static constexpr int kCons = wgmma_rs::kCons;
  static constexpr int kBW = wgmma_rs::kBW;
  static constexpr int kThreads = 128 * (kCons + 1);
  static constexpr int kCtasPerSm = 1;
  static constexpr int kStages = kResident ? 8 : 5;
  // 72: the walk's per-column-tile sources in registers (64 spilled).
  static constexpr int kProducerRegs = 72;
  static constexpr int kConsumerRegs = 216;
  static constexpr int kStageB = kBN * kBK * 2;
  static constexpr int kStageRaw = kBW * kRawStr;
  // Each row's four E8M0 bytes of the 128-wide K window holding the k-tile.
  static constexpr int kStageScale = kBW * 4;
  static constexpr int kBTiles = kResident ? kRsResidentMaxK / kBK : 0;
  // B tiles 1024-aligned (the 128-byte swizzle's period): the resident
  // regions first, or one per stage.
  static constexpr int kBRegion = kBTiles * kStageB;
  static constexpr int kStageBytes =
      kResident ? kStageRaw + kStageScale : (kStageB + kStageRaw + kStageScale + 1023) / 1024 * 1024;
  static constexpr int kRawOff = kResident ? 0 : kStageB;  // in a stage
  static constexpr int kEpiOff = kBRegion + kStages * kStageBytes;
  static constexpr int kTablesOff = kEpiOff + kCons * kEpiStageBytes;
  static constexpr int kBarOff = kTablesOff + (kBN + kBW) * 4;
  static constexpr int kBars = 2 * kStages + kBTiles;  // full, empty, then B's
  static constexpr int kSmemBytes = kBarOff + kBars * 8 + 1024;  // + slack to align the base to 1024
  static_assert(kCtasPerSm * (kSmemBytes + 1024) <= 228 * 1024, "shared memory (1 KB a CTA for the runtime)");
  static_assert(kCtasPerSm * 128 * (kProducerRegs + kCons * kConsumerRegs) <= 64 * 1024, "registers");
  static_assert(kStageRaw % 16 == 0 && kStageBytes % 16 == 0, "16-byte copies");
};

// Byte offset of (row r, 16-byte K chunk c) in a 128-byte-swizzled [rows x 64] bf16 tile.
__device__ __forceinline__ uint32_t SwizzledOffset(int r, int c) {
  return static_cast<uint32_t>(r * 128 + ((c ^ (r & 7)) << 4));
}

// The expert's weight row held in row j (0..kBW) of column tile col_tile, -1
// past the weights.
template <int kEpi>
__device__ __forceinline__ int WeightRow(const GemmParams& p, int col_tile, int j) {
  if (kEpi == kEpiSwiglu) {
    const int col = col_tile * (kBW / 2) + (j >> 4) * 8 + (j & 7);
    return col >= p.inter ? -1 : ((j & 8) != 0 ? p.inter + col : col);
  }
  const int64_t row = static_cast<int64_t>(col_tile) * kBW + j;
  return row >= p.nw ? -1 : static_cast<int>(row);
}

struct Smem {
  uint8_t* base;
  const int* pair;   // [kBN] the (token, expert) pair of each tile row, -1 padding
  const int* w_row;  // [kBW] weight row of each CTA row in the first column tile, -1 past the weights
  int epi_off;       // the consumers' epilogue staging (EpiStage), kEpiStageBytes each
  uint32_t full, empty, b_full;  // the stages' mbarriers and the resident B tiles', 8 bytes apart
  __device__ uint32_t Full(int s) const { return full + 8 * s; }
  __device__ uint32_t Empty(int s) const { return empty + 8 * s; }
  __device__ uint32_t BFull(int kt) const { return b_full + 8 * kt; }
};

// Warpgroup Cfg::kCons: the copies of every k-tile. Thread pt copies
// 16-byte chunk pt % 8 of tile rows pt / 8 + 16 i (their sources fixed for
// the tile, kept in registers as chunk offsets into A), both 16-byte halves'
// worth of two weight rows, and one weight row's E8M0 window, so a k-tile
// costs a few instructions per copy. Rows past the tile's own are not
// copied: their N columns are computed from stale bytes and never stored.
// Step n of the walk (column tile n / k_tiles, k-tile n % k_tiles) uses
// stage n % kStages; B's k-tiles go with the weights into every stage, or
// with kResident during the first column tile only, each into its own
// region, arriving on its own barrier.
template <int kEpi, bool kResident>
__device__ __forceinline__ void Produce(const GemmParams& p, const Smem& sm, int expert, int rows, int col_tile0,
                                        int cols, int k_tiles) {
  using C = Cfg<kResident>;
  constexpr int kRawPer = C::kBW * 2 / 128;  // 16-byte raw copies per thread and k-tile
  const int pt = threadIdx.x - C::kCons * 128;
  const int ch = pt & 7, r0 = pt >> 3;
  const uint4* a16 = reinterpret_cast<const uint4*>(p.a);
  const uint32_t row_chunks = static_cast<uint32_t>(p.k / 8);
  uint32_t a_src[kRowsPerProducer];  // 16-byte chunk offset of this thread's chunk of each row at k = 0
#pragma unroll
  for (int i = 0; i < kRowsPerProducer; ++i) {
    const int r = r0 + 16 * i;
    a_src[i] = r < rows ? static_cast<uint32_t>(sm.pair[r] / p.a_row_div) * row_chunks + ch : 0u;
  }
  const uint8_t* w_e = p.w + static_cast<int64_t>(expert) * p.nw * (p.k / 2);
  const uint8_t* s_e = p.ws + static_cast<int64_t>(expert) * p.nw * (p.k / 32);
  const uint32_t b_dst = SwizzledOffset(r0, ch);  // row r0 + 16 i is 2048 i further
  const uint32_t base = SmemAddr(sm.base);
  int n = 0;
  for (int c = 0; c < cols; ++c) {
    const uint8_t* w_src[kRawPer];  // this thread's raw half-rows at k = 0 (nullptr: past the weights, zero-filled)
#pragma unroll
    for (int i = 0; i < kRawPer; ++i) {
      const int cr = pt + 128 * i;
      const int wr = c == 0 ? sm.w_row[cr >> 1] : WeightRow<kEpi>(p, col_tile0 + c, cr >> 1);
      w_src[i] = wr >= 0 ? w_e + static_cast<int64_t>(wr) * (p.k / 2) + (cr & 1) * 16 : nullptr;
    }
    const int scale_row =
        pt >= C::kBW ? -1 : c == 0 ? sm.w_row[pt] : WeightRow<kEpi>(p, col_tile0 + c, pt);
    const uint8_t* s_src = scale_row >= 0 ? s_e + static_cast<int64_t>(scale_row) * (p.k / 32) : nullptr;
    for (int kt = 0; kt < k_tiles; ++kt, ++n) {
      const int s = n % C::kStages;
      sm90::MbarWait(sm.Empty(s), ((n / C::kStages) & 1) ^ 1);
      const uint32_t st = base + C::kBRegion + s * C::kStageBytes;
      if (!kResident || c == 0) {
        const uint32_t bt = kResident ? base + kt * C::kStageB : st;
#pragma unroll
        for (int i = 0; i < kRowsPerProducer; ++i) {
          if (r0 + 16 * i < rows) CpAsync16Prefetch256(bt + b_dst + 2048 * i, a16 + a_src[i] + kt * (kBK / 8), 16);
        }
        if (kResident) sm90::CpAsyncMbarArrive(sm.BFull(kt));
      }
#pragma unroll
      for (int i = 0; i < kRawPer; ++i) {
        const int cr = pt + 128 * i;
        CpAsync16Prefetch256(st + C::kRawOff + (cr >> 1) * kRawStr + (cr & 1) * 16,
                             w_src[i] != nullptr ? w_src[i] + kt * (kBK / 2) : w_e, w_src[i] != nullptr ? 16 : 0);
      }
      if (pt < C::kBW) {
        CpAsync4(st + C::kRawOff + C::kStageRaw + pt * 4, s_src != nullptr ? s_src + (kt >> 1) * 4 : s_e,
                 s_src != nullptr ? 4 : 0);
      }
      sm90::CpAsyncMbarArrive(sm.Full(s));
    }
  }
  sm80::CpAsyncWait<0>();
}

// The accumulators of one column tile into the output. Layout of m64nN:
// weight row 16 warp + g + 8 h of the warpgroup, tile row 8 j + 2 q + c, in
// acc[4 j + 2 h + c]. SwiGLU (a quarter of the bytes of down's rows) stores
// straight from the registers; bf16 and fp32 go through EpiStage.
// kRne: p.rounding is RTNE, which cvt.rn.bf16x2 does two at a time.
template <int kEpi, int kN, bool kRne>
__device__ __forceinline__ void Store(const GemmParams& p, const Smem& sm, const float (&acc)[kN / 2], int rows,
                                      int col_tile, int wg, int warp, int lane, int g, int q) {
  if (kEpi == kEpiSwiglu) {
    const int col = col_tile * (kBW / 2) + wg * 32 + warp * 8 + g;
    if (col >= p.inter) return;
#pragma unroll
    for (int j = 0; j < kN / 8; ++j) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int t = 8 * j + 2 * q + c;
        if (t >= rows) continue;
        const float gate = acc[4 * j + c], up = acc[4 * j + 2 + c];
        static_cast<uint16_t*>(p.out)[static_cast<int64_t>(sm.pair[t]) * p.out_cols + col] =
            static_cast<uint16_t>(FloatToBf16Bits(gate / (1.f + expf(-gate)) * up, p.rounding));
      }
    }
    return;
  }
  using E = EpiStage<kEpi>;
  constexpr int kColsPerPiece = 16 / E::kElem;
  uint8_t* stage = sm.base + sm.epi_off + wg * kEpiStageBytes;
  const int tid = threadIdx.x & 127;
  const int bar = 1 + wg;  // named barrier of this warpgroup (0 is __syncthreads)
  const int64_t col0 = static_cast<int64_t>(col_tile) * kBW + wg * 64;
  // 16-byte stores need every row's piece 16-byte aligned.
  const bool vec = (p.out_cols * E::kElem) % 16 == 0 && (reinterpret_cast<uintptr_t>(p.out) & 15u) == 0;
  uint8_t* out = static_cast<uint8_t*>(p.out);
#pragma unroll
  for (int pass = 0; pass < (kN + E::kRows - 1) / E::kRows; ++pass) {
    const int t0 = pass * E::kRows;
    if (t0 >= rows) break;  // rows is the CTA's: every thread leaves at the same pass
    sm90::NamedBarrierSync(bar, 128);  // the last pass's pieces are read
    if (kEpi == kEpiF32) {
#pragma unroll
      for (int jj = 0; jj < E::kRows / 8; ++jj) {
        const int j = t0 / 8 + jj;
        if (j >= kN / 8) break;
#pragma unroll
        for (int c = 0; c < 2; ++c) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            *reinterpret_cast<float*>(stage + (8 * jj + 2 * q + c) * E::kPitch + (warp * 16 + g + 8 * h) * 4) =
                acc[4 * j + 2 * h + c];
          }
        }
      }
    } else {
      // Two 8-row blocks of tile rows (j, j + 1) x the warp's two 8-column
      // halves (h) per stmatrix: lane 8m + r addresses tile row 8 (j + m / 2)
      // + r, columns 16 warp + 8 (m % 2).
      const int m = lane >> 3, r = lane & 7;
      const uint32_t lane_addr =
          sm80::SmemAddr(stage) + (8 * (m >> 1) + r) * E::kPitch + (warp * 16 + 8 * (m & 1)) * 2;
#pragma unroll
      for (int jj = 0; jj < E::kRows / 8; jj += 2) {
        const int j = t0 / 8 + jj;
        if (j >= kN / 8) break;  // kN / 8 is a multiple of 4: j + 1 is in too
        uint32_t v[4];
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          const float lo = acc[4 * (j + (b >> 1)) + 2 * (b & 1)], hi = acc[4 * (j + (b >> 1)) + 2 * (b & 1) + 1];
          // cvt's NaN is not the canonical 0x7FFF of DESIGN §4: NaNs take the exact path.
          v[b] = kRne && !(isnan(lo) || isnan(hi)) ? sm80::PackBf16x2Rn(lo, hi) : PackBf16x2(lo, hi, p.rounding);
        }
        sm90::StMatrixX4Trans(lane_addr + jj * 8 * E::kPitch, v[0], v[1], v[2], v[3]);
      }
    }
    sm90::NamedBarrierSync(bar, 128);  // the pass is in shared memory
#pragma unroll
    for (int i = 0; i < E::kPerThread; ++i) {
      const int k = tid + 128 * i;
      const int tr = k / E::kChunks, piece = k % E::kChunks;
      const int t = t0 + tr;
      const int64_t col = col0 + piece * kColsPerPiece;
      if (t >= rows || col >= p.nw) continue;
      const uint8_t* s = stage + tr * E::kPitch + piece * 16;
      uint8_t* o = out + (static_cast<int64_t>(sm.pair[t]) * p.out_cols + col) * E::kElem;
      if (vec && col + kColsPerPiece <= p.nw) {
        *reinterpret_cast<uint4*>(o) = *reinterpret_cast<const uint4*>(s);
      } else {
        for (int e = 0; e < kColsPerPiece && col + e < p.nw; ++e) {
          if (kEpi == kEpiF32) {
            reinterpret_cast<float*>(o)[e] = reinterpret_cast<const float*>(s)[e];
          } else {
            reinterpret_cast<uint16_t*>(o)[e] = reinterpret_cast<const uint16_t*>(s)[e];
          }
        }
      }
    }
  }
}

// Warpgroups 0..Cfg::kCons-1 on a tile of up to kSteps x 32 rows, over
// `cols` column tiles from col_tile0.
template <int kEpi, bool kResident, int kSteps>
__device__ __forceinline__ void Consume(const GemmParams& p, const Smem& sm, int rows, int col_tile0,
                                        int cols, int k_tiles) {
  using C = Cfg<kResident>;
  constexpr int kN = kSteps * kNStep, kStages = C::kStages, kStageBytes = C::kStageBytes;
  constexpr int kStageB = C::kStageB, kStageRaw = C::kStageRaw;
  const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  const int g = lane >> 2, q = lane & 3;
  const int r0 = wg * 64 + warp * 16 + g;  // this thread's weight rows: r0 and r0 + 8 of the CTA
  const uint32_t base = SmemAddr(sm.base);

  float acc[kN / 2];
  uint32_t frag[2][4][4];  // by k-tile parity: k16 step, A register

  // The A fragments of k-tile kt: step s, register a0..a3 = (row r0, K
  // 16s + 2q..+1), (r0 + 8, same), (r0, 16s + 8 + 2q..+1), (r0 + 8, same),
  // i.e. byte q of raw words 2s and 2s + 1 of each row. When a warp vote
  // finds every scale of the k-tile's blocks in its lanes needing one
  // multiply (real weights' scales always do), the common path: the bits
  // of each byte in five instructions and one multiply by a scale made with
  // one IMAD; else each pair goes through DequantPair's general scale.
  const uint32_t byte_sel = 0x4440u + static_cast<uint32_t>(q);
  auto dequant = [&](int stage, int kt, uint32_t(&f)[4][4]) {
    const uint8_t* st = sm.base + C::kBRegion + stage * kStageBytes + C::kRawOff;
    const uint8_t* rx = st + r0 * kRawStr;
    const uint8_t* ry = rx + 8 * kRawStr;
    const uint4 x0 = *reinterpret_cast<const uint4*>(rx), x1 = *reinterpret_cast<const uint4*>(rx + 16);
    const uint4 y0 = *reinterpret_cast<const uint4*>(ry), y1 = *reinterpret_cast<const uint4*>(ry + 16);
    const uint32_t sx = *reinterpret_cast<const uint32_t*>(st + kStageRaw + r0 * 4);
    const uint32_t sy = *reinterpret_cast<const uint32_t*>(st + kStageRaw + (r0 + 8) * 4);
    const int sh = (kt & 1) * 16;  // the k-tile's two 32-element blocks: bytes 2 (kt & 1) and + 1
    const uint32_t scx[2] = {(sx >> sh) & 0xFFu, (sx >> (sh + 8)) & 0xFFu};
    const uint32_t scy[2] = {(sy >> sh) & 0xFFu, (sy >> (sh + 8)) & 0xFFu};
    const uint32_t wx[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
    const uint32_t wy[8] = {y0.x, y0.y, y0.z, y0.w, y1.x, y1.y, y1.z, y1.w};
    // sc in 1..128 <=> sc - 1 < 128 (unsigned).
    const bool one = ((scx[0] - 1u) | (scx[1] - 1u) | (scy[0] - 1u) | (scy[1] - 1u)) < 128u;
    if (__all_sync(0xFFFFFFFFu, one)) {
      const uint32_t fx[2] = {OneMultiplyScale(scx[0]).f1, OneMultiplyScale(scx[1]).f1};
      const uint32_t fy[2] = {OneMultiplyScale(scy[0]).f1, OneMultiplyScale(scy[1]).f1};
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        f[s][0] = MulBf16x2(Fp4PairBitsOfByte(wx[2 * s], byte_sel), fx[s >> 1]);
        f[s][1] = MulBf16x2(Fp4PairBitsOfByte(wy[2 * s], byte_sel), fy[s >> 1]);
        f[s][2] = MulBf16x2(Fp4PairBitsOfByte(wx[2 * s + 1], byte_sel), fx[s >> 1]);
        f[s][3] = MulBf16x2(Fp4PairBitsOfByte(wy[2 * s + 1], byte_sel), fy[s >> 1]);
      }
      return;
    }
    const BlockScale bx[2] = {MakeBlockScale(scx[0]), MakeBlockScale(scx[1])};
    const BlockScale by[2] = {MakeBlockScale(scy[0]), MakeBlockScale(scy[1])};
    const int qs = 8 * q;
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      f[s][0] = DequantPair(wx[2 * s] >> qs, bx[s >> 1]);
      f[s][1] = DequantPair(wy[2 * s] >> qs, by[s >> 1]);
      f[s][2] = DequantPair(wx[2 * s + 1] >> qs, bx[s >> 1]);
      f[s][3] = DequantPair(wy[2 * s + 1] >> qs, by[s >> 1]);
    }
  };

  // Step n of the walk (stage n % kStages) holds k-tile kt of the current column tile.
  auto step = [&](int n, int kt, bool first_col, uint32_t(&f)[4][4]) {
    const int s = n % kStages;
    sm90::MbarWait(sm.Full(s), (n / kStages) & 1);
    if (kResident && first_col) sm90::MbarWait(sm.BFull(kt), 0);
    dequant(s, kt, f);  // overlaps the wgmmas of the previous k-tile
    const uint32_t b_tile = kResident ? base + kt * kStageB : base + s * kStageBytes;
    const uint64_t db = sm90::MakeSmemDesc(b_tile, 16, 1024);
    constexpr uint64_t kStep = 32 >> 4;  // a k-step of 16 is 32 bytes along the swizzled row
    sm90::FenceOperand(acc);
    sm90::FenceOperand(f);
    sm90::WgmmaFence();
#pragma unroll
    for (int ks = 0; ks < kBK / 16; ++ks) sm90::WgmmaRS<kN, sm90::Bf16>(acc, f[ks], db + ks * kStep, 1);
    sm90::WgmmaCommit();
    sm90::FenceOperand(acc);
    sm90::WgmmaWait<1>();  // the previous k-tile is done: its stage and fragment buffer are free
    if (kt > 0 && lane == 0) sm90::MbarArrive(sm.Empty((n - 1) % kStages));
  };
  int n0 = 0;  // the walk's step at k-tile 0 of this column tile
  for (int c = 0; c < cols; ++c, n0 += k_tiles) {
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) acc[i] = 0.f;
    // k_tiles is even (K % 128 == 0): the fragment buffers alternate with static indices.
    for (int kt = 0; kt < k_tiles; kt += 2) {
      step(n0 + kt, kt, c == 0, frag[0]);
      step(n0 + kt + 1, kt + 1, c == 0, frag[1]);
    }
    sm90::WgmmaWait<0>();
    sm90::FenceOperand(acc);
    // The column tile's last stage: the producer may refill it while this one's outputs are stored.
    if (lane == 0) sm90::MbarArrive(sm.Empty((n0 + k_tiles - 1) % kStages));
    if (kEpi == kEpiBf16 && p.rounding == kRoundRtne) {
      Store<kEpi, kN, true>(p, sm, acc, rows, col_tile0 + c, wg, warp, lane, g, q);
    } else {
      Store<kEpi, kN, false>(p, sm, acc, rows, col_tile0 + c, wg, warp, lane, g, q);
    }
  }
}

// Column tiles of the GEMM: kBW weight rows each, or kBW / 2 intermediate
// columns with SwiGLU.
template <int kEpi>
__host__ __device__ __forceinline__ int64_t ColTiles(const GemmParams& p) {
  return kEpi == kEpiSwiglu ? (p.inter + kBW / 2 - 1) / (kBW / 2) : (p.nw + kBW - 1) / kBW;
}

template <int kEpi, bool kResident>
__global__ void __launch_bounds__(Cfg<kResident>::kThreads, Cfg<kResident>::kCtasPerSm)
    WgmmaRsGemmKernel(const GemmParams p) {
  using C = Cfg<kResident>;
  extern __shared__ __align__(128) uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024u - (SmemAddr(smem_raw) & 1023u)) & 1023u);
  const int tile = blockIdx.y;
  if (tile >= *p.num_tiles) return;
  const int expert = p.tile_expert[tile];
  const int rows = p.tile_rows[tile];
  if (rows <= 0) return;
  const int steps = (rows + kNStep - 1) / kNStep;
  const int col_tile0 = blockIdx.x * p.cols_per_cta;
  const int cols = static_cast<int>(min(static_cast<int64_t>(p.cols_per_cta), ColTiles<kEpi>(p) - col_tile0));
  const int tid = threadIdx.x;

  int* pair = reinterpret_cast<int*>(smem + C::kTablesOff);
  int* w_row = pair + kBN;
  for (int r = tid; r < kBN; r += C::kThreads) pair[r] = r < rows ? p.sorted[static_cast<int64_t>(tile) * kBN + r] : -1;
  for (int j = tid; j < kBW; j += C::kThreads) w_row[j] = WeightRow<kEpi>(p, col_tile0, j);
  const uint32_t bars = SmemAddr(smem + C::kBarOff);
  const Smem sm{smem, pair, w_row, C::kEpiOff, bars, bars + 8 * C::kStages, bars + 16 * C::kStages};
  if (tid == 0) {
    for (int s = 0; s < C::kStages; ++s) {
      sm90::MbarInit(sm.Full(s), 128);         // the producer's threads
      sm90::MbarInit(sm.Empty(s), kCons * 4);  // one lane of each consumer warp
    }
    for (int kt = 0; kt < C::kBTiles; ++kt) sm90::MbarInit(sm.BFull(kt), 128);
    sm90::FenceMbarInit();
  }
  __syncthreads();

  const int k_tiles = static_cast<int>(p.k / kBK);
  if (sm90::WarpUniform(tid >> 7) == kCons) {
    sm90::SetMaxNRegDec<C::kProducerRegs>();
    Produce<kEpi, kResident>(p, sm, expert, rows, col_tile0, cols, k_tiles);
    return;
  }
  sm90::SetMaxNRegInc<C::kConsumerRegs>();
  switch (steps) {
    case 1: Consume<kEpi, kResident, 1>(p, sm, rows, col_tile0, cols, k_tiles); break;
    case 2: Consume<kEpi, kResident, 2>(p, sm, rows, col_tile0, cols, k_tiles); break;
    case 3: Consume<kEpi, kResident, 3>(p, sm, rows, col_tile0, cols, k_tiles); break;
    case 4: Consume<kEpi, kResident, 4>(p, sm, rows, col_tile0, cols, k_tiles); break;
    case 5: Consume<kEpi, kResident, 5>(p, sm, rows, col_tile0, cols, k_tiles); break;
    default: Consume<kEpi, kResident, kMaxSteps>(p, sm, rows, col_tile0, cols, k_tiles); break;
  }
}

}  // namespace wgmma_rs

template <int kEpi>
cudaError_t LaunchWgmmaRsGemm(const GemmParams& p, int64_t max_tiles, cudaStream_t stream) {
  if (p.cols_per_cta < 1) return cudaErrorInvalidValue;
  const int64_t ctas = (wgmma_rs::ColTiles<kEpi>(p) + p.cols_per_cta - 1) / p.cols_per_cta;
  if (p.b_resident) {
    if (p.k > kRsResidentMaxK) return cudaErrorInvalidValue;
    using C = wgmma_rs::Cfg<true>;
    return LaunchOverTiles<C::kThreads, C::kSmemBytes>(wgmma_rs::WgmmaRsGemmKernel<kEpi, true>, p, ctas, max_tiles,
                                                       stream);
  }
  using C = wgmma_rs::Cfg<false>;
  return LaunchOverTiles<C::kThreads, C::kSmemBytes>(wgmma_rs::WgmmaRsGemmKernel<kEpi, false>, p, ctas, max_tiles,
                                                     stream);
}

}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM90_MOE_WGMMA_RS_GEMM_CUH_
