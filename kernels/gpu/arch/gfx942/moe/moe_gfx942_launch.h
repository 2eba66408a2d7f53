// The launch of the gfx942 MXFP4 MoE GEMMs (the slab-walking GEMM of
// moe_gemm_mxfp4_cta.h at its two CTA shapes, moe_gemm_mxfp4.hip and
// moe_gemm_mxfp4_m64.hip; the down kernel, moe_down_mxfp4.hip), as pure host
// functions tested on the CPU: the CTA shapes the kernels are compiled for,
// the routing tile each reads and the choice between them, the grid of each
// projection, and which kernel a call's stages take. The code objects are
// held to the same figures by the code-object tests of moe/BUILD.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_GFX942_MOE_MOE_GFX942_LAUNCH_H_
#define KERNELSERVE_KERNELS_GPU_ARCH_GFX942_MOE_MOE_GFX942_LAUNCH_H_

#include <cstdint>

#include "kernels/gpu/common/host_device.h"

namespace kernelserve {
namespace gpu {
namespace moe {
namespace gfx942 {

constexpr int kThreads = 256;   // four wave64s
constexpr int kTileRows = 16;   // (token, expert) pairs per decode routing tile: one MFMA M-tile
constexpr int kCtaCols = 64;    // output columns per decode CTA: 16 per wave
constexpr int kKMultiple = 32;  // K steps of one E8M0 scale block

// The slab-walking GEMM (moe_gemm_mxfp4_cta.h) comes in two CTA shapes, one
// code object each, as the seed picks its GEMM tile per shape:
// - decode (moe_gemm_mxfp4.hip): a 16-pair routing tile x 64 output
//   columns, four waves side by side along the columns (one 16 x 16 MFMA
//   tile each, gate and up under SwiGLU). At a few rows per expert a larger
//   tile would be mostly padding.
// - prefill (moe_gemm_mxfp4_m64.hip): a 64-pair routing tile x 128 weight
//   rows (128 output columns; 64 gate and 64 up columns under SwiGLU), the
//   four waves in a 2 x 2 grid of 32 rows x 64 weight rows each (2 x 4 MFMA
//   tiles). Each weight is decoded once for 64 pairs instead of 16, each A
//   operand read from LDS feeds four MFMAs, each decoded B operand two.
constexpr int kPrefillTileRows = 64;
struct CtaShape {
  int rows;             // pairs per routing tile: the A rows of a slab
  int out_cols;         // output columns per CTA
  int wave_row_groups;  // waves along the rows; the rest go along the columns
  bool swiglu;          // weight rows are the gate columns, then the up columns
};
KS_HOST_DEVICE constexpr CtaShape CtaOf(int tile_rows, bool swiglu) {
  return tile_rows == kPrefillTileRows ? CtaShape{kPrefillTileRows, swiglu ? 64 : 128, 2, swiglu}
                                       : CtaShape{kTileRows, kCtaCols, 1, swiglu};
}
// Weight rows staged per slab: one per output column, two under SwiGLU.
KS_HOST_DEVICE constexpr int WeightRows(const CtaShape& s) { return s.swiglu ? 2 * s.out_cols : s.out_cols; }
// A wave's MFMA tiles: row tiles x output-column tiles (each with its up tile under SwiGLU).
KS_HOST_DEVICE constexpr int WaveRowTiles(const CtaShape& s) { return s.rows / 16 / s.wave_row_groups; }
KS_HOST_DEVICE constexpr int WaveColTiles(const CtaShape& s) {
  return s.out_cols / 16 / (kThreads / 64 / s.wave_row_groups);
}
// The tile row (A row of the slab) wave `wave` feeds its row tile m from at
// MFMA lane row lr; its D rows are WaveRow(.., 0) + 4 (lane / 16) + i.
KS_HOST_DEVICE constexpr int WaveRow(const CtaShape& s, int wave, int m, int lr) {
  return (wave % s.wave_row_groups * WaveRowTiles(s) + m) * 16 + lr;
}
// The CTA's output column of the wave's column tile n at lane column lr: the
// B operand's column, from slab weight row WaveCol (gate or only) and
// out_cols + WaveCol (up).
KS_HOST_DEVICE constexpr int WaveCol(const CtaShape& s, int wave, int n, int lr) {
  return (wave / s.wave_row_groups * WaveColTiles(s) + n) * 16 + lr;
}

// Slab weight row r of column block `block` (r < out_cols: the gate or only
// rows; the up rows, at + inter in the expert's weights, after them) as a
// row of expert e's weights (nw rows each), or -1 past `out_cols`.
KS_HOST_DEVICE constexpr int64_t ExpertWeightRow(const CtaShape& s, int64_t block, int r, int64_t e, int64_t nw,
                                                 int64_t inter, int64_t out_cols) {
  return block * s.out_cols + r % s.out_cols >= out_cols
             ? -1
             : e * nw + block * s.out_cols + r % s.out_cols + (r >= s.out_cols ? inter : 0);
}

// K is walked in slabs of kKSlab, each staged in LDS (double-buffered) by
// the whole CTA with 16-byte loads: the tile's activation rows (bf16), the
// CTA's weight rows as packed E2M1 nibbles, and their E8M0 scale bytes.
// Rows are padded by 16 bytes.
constexpr int kKSlab = 64;                   // two scale blocks
constexpr int kARowBytes = kKSlab * 2 + 16;  // 144
constexpr int kWRowBytes = kKSlab / 2 + 16;  // 48
KS_HOST_DEVICE constexpr int AStageBytes(const CtaShape& s) { return s.rows * kARowBytes; }
// One slab's buffer: activations, weight nibbles, scales (a byte per row and scale block).
KS_HOST_DEVICE constexpr int SlabBytes(const CtaShape& s) {
  return AStageBytes(s) + WeightRows(s) * kWRowBytes + WeightRows(s) * (kKSlab / kKMultiple);
}
// Two buffers. Decode: 11008 bytes (bf16 and fp32 epilogues), 17408
// (SwiGLU). Prefill: 31232 (every epilogue stages 128 weight rows).
KS_HOST_DEVICE constexpr int LdsBytes(const CtaShape& s) { return 2 * SlabBytes(s); }
// Slab piece pc (16 bytes; thread t moves pieces t, t + kThreads, ...): the
// activation rows first (8 pieces of 8 k per row), then the weight rows (2
// pieces of 32 k per row). `row` is the tile's pair row or the CTA's weight
// row, `k` the first k in the slab, `lds` the byte offset in the slab's
// buffer; kind kNone past the slab's pieces.
enum SlabPieceKind : int { kNone = 0, kActivation = 1, kWeight = 2 };
struct SlabPiece {
  int kind, row, k, lds;
};
KS_HOST_DEVICE constexpr SlabPiece SlabPieceAt(const CtaShape& s, int pc) {
  return pc < s.rows * kKSlab / 8
             ? SlabPiece{kActivation, pc / 8, pc % 8 * 8, pc / 8 * kARowBytes + pc % 8 * 16}
         : pc < s.rows * kKSlab / 8 + 2 * WeightRows(s)
             ? SlabPiece{kWeight, (pc - s.rows * kKSlab / 8) / 2, (pc - s.rows * kKSlab / 8) % 2 * 32,
                         AStageBytes(s) + (pc - s.rows * kKSlab / 8) / 2 * kWRowBytes +
                             (pc - s.rows * kKSlab / 8) % 2 * 16}
             : SlabPiece{kNone, 0, 0, 0};
}
// Scale byte t of a slab (t < WeightRows * 2): weight row t / 2, the 32-k
// block t % 2, at this offset of the slab's buffer.
KS_HOST_DEVICE constexpr int SlabScaleLds(const CtaShape& s, int t) {
  return AStageBytes(s) + WeightRows(s) * kWRowBytes + t;
}

// Every decode epilogue is compiled for three CTAs (four waves each) per
// CU, three waves per SIMD: the SwiGLU kernel's LDS fits three times in
// 64 KiB, not four, and 512 / 3 leaves 168 VGPR + AGPR per lane
// (allocation granule 8). The prefill kernels' 31232 bytes fit twice: two
// waves per SIMD, 256 registers per lane.
constexpr int kWavesPerSimd = 3;
constexpr int kMaxRegs = 168;
constexpr int kPrefillWavesPerSimd = 2;
constexpr int kPrefillMaxRegs = 256;
KS_HOST_DEVICE constexpr int WavesPerSimd(int tile_rows) {
  return tile_rows == kPrefillTileRows ? kPrefillWavesPerSimd : kWavesPerSimd;
}

// The GEMM's C names, one per epilogue (moe_params.h's Epilogue), of each CTA shape.
constexpr char kGemmBf16[] = "KsMoeGemmMxfp4Gfx942Bf16";
constexpr char kGemmSwiglu[] = "KsMoeGemmMxfp4Gfx942Swiglu";
constexpr char kGemmF32[] = "KsMoeGemmMxfp4Gfx942F32";
constexpr char kPrefillBf16[] = "KsMoeGemmMxfp4Gfx942M64Bf16";
constexpr char kPrefillSwiglu[] = "KsMoeGemmMxfp4Gfx942M64Swiglu";
constexpr char kPrefillF32[] = "KsMoeGemmMxfp4Gfx942M64F32";

// The down projection's own kernel (moe_down_mxfp4.hip), the seed's design
// for a short K (the expert width I, sharded by tensor parallelism: 384,
// 512, 768): the CTA stages its routing tile's whole A (16 rows x K bf16)
// in LDS once, behind the GEMM's one barrier, each wave takes its A
// operands for every k-step from there into registers, and the CTA sweeps
// kDownCtaCols output columns against them, streaming the weights from
// global memory (each weight is used by one lane once). K a multiple of
// 128 up to 768; any other K runs on the gate/up kernel above with the bf16
// or fp32 epilogue.
constexpr int kDownMaxK = 768;
constexpr int kDownKBlock = 128;      // K per 16-byte weight load of each of a column's four lanes
constexpr int kDownCtaCols = 256;     // output columns per CTA: 16 column tiles, four per wave
constexpr int kDownTilesPerStep = 2;  // column tiles a wave computes together
KS_HOST_DEVICE constexpr bool DownServes(int64_t k) {
  return k >= kDownKBlock && k <= kDownMaxK && k % kDownKBlock == 0;
}
// A row of the staged tile, padded by 16 bytes (at most 2-way bank conflicts
// on the operand reads), and the LDS of the largest K: 24832 bytes, two
// CTAs per CU, so two waves per SIMD and 256 VGPR + AGPR per lane.
KS_HOST_DEVICE constexpr int DownARowBytes(int k) { return 2 * k + 16; }
constexpr int kDownLdsBytes = kTileRows * DownARowBytes(kDownMaxK);
constexpr int kDownWavesPerSimd = 2;
constexpr int kDownMaxRegs = 256;
// The k that lane quarter lq (lane / 16) feeds the MFMA at k-step ks,
// element i (A and B alike, so the sum over k is the GEMM's): within each
// 128-k block a quarter takes 32 consecutive k, four per k-step, so its
// weight nibbles for the block are one 16-byte load (at byte 16 lq of the
// block's 64) under one E8M0 scale (block 4 (ks / 8) + lq).
KS_HOST_DEVICE constexpr int DownK(int ks, int lq, int i) {
  return ks / 8 * kDownKBlock + lq * 32 + ks % 8 * 4 + i;
}
// Where quarter lq's 16-byte load of 128-k block j starts in a weight row
// (bytes of nibbles), and the E8M0 scale it is under (index in the row's
// K / 32 scales).
KS_HOST_DEVICE constexpr int DownWeightByte(int j, int lq) { return j * (kDownKBlock / 2) + lq * 16; }
KS_HOST_DEVICE constexpr int DownScaleBlock(int j, int lq) { return j * (kDownKBlock / 32) + lq; }
// Of a quarter's 16-byte load for a block (four 32-bit words), the two
// bytes of nibbles k-step s (0..7) of the block reads: bytes 2 s and 2 s + 1,
// element 2 i in the low nibble of byte i.
KS_HOST_DEVICE constexpr uint32_t DownStepBytes(uint32_t word_s_over_2, int s) {
  return (word_s_over_2 >> (16 * (s % 2))) & 0xFFFFu;
}
constexpr char kDownBf16[] = "KsMoeDownMxfp4Gfx942Bf16";
constexpr char kDownF32[] = "KsMoeDownMxfp4Gfx942F32";

}  // namespace gfx942
}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve

#if !defined(__HIP_DEVICE_COMPILE__)
#include <string>

#include "kernels/api/ops.h"
#include "kernels/gpu/moe/moe_plan.h"

namespace kernelserve {
namespace gpu {
namespace moe {
namespace gfx942 {

// The routing tile of a GEMM with K `k` over `weight_rows` weight rows per
// expert at `rows_per_expert` (the mean over the experts the batch can
// touch): kPrefillTileRows when every one of these holds, else kTileRows.
// - rows_per_expert >= kPrefillMinRowsPerExpert: a 64-row tiling pads each
//   expert by 24 rows more than a 16-row one on average ((64 - 16) / 2), at
//   most 3/8 of its rows from 64 on, while reading each weight a quarter as
//   often. Below it (decode: the seed's 1.3 rows per expert at T = 32) the
//   16-row tile is mostly padding already and the larger one four times so.
// - weight_rows >= 128: a prefill CTA spans 128 weight rows; a narrower GEMM
//   would leave part of every prefill CTA without columns.
// - k >= kPrefillMinK (two slabs): a CTA's first slab is loaded before any
//   MFMA, not overlapped; the prefill CTA's is four times the decode CTA's
//   activations, and with one slab nothing hides it, where the 16-row
//   tiling spreads the same GEMM over four times the CTAs.
// A pure function of the shape: the same call always gets the same tile.
constexpr double kPrefillMinRowsPerExpert = 64;
constexpr int64_t kPrefillMinK = 2 * kKSlab;
int SelectTileRows(double rows_per_expert, int64_t k, int64_t weight_rows);

// The routing tiles a validated call reads, chosen by SelectTileRows on its
// first GEMM (a layer's down half reads gate/up's tiles): gate/up and the
// layer K = hidden over 2 I weight rows, down K = I over hidden.
MoePlan Plan(const MoeParams& p);

// Empty when the kernel serves validated `p`, else why not.
std::string Unsupported(const MoeParams& p);

// Grid of one slab-walking GEMM: (column blocks of the shape's out_cols,
// routing tiles at most). CTAs past the routing's tile count return at once.
struct GemmGrid {
  unsigned x = 1, y = 1;
};
GemmGrid Grid(const CtaShape& s, int64_t out_cols, int64_t max_tiles);

// The slab-walking kernel of a routing tile (kTileRows or kPrefillTileRows)
// and an epilogue (moe_params.h's kEpiBf16, kEpiSwiglu, kEpiF32).
const char* GemmKernel(int tile_rows, int epilogue);

// The down kernel's grid: (column blocks of kDownCtaCols, routing tiles at
// most), for a call whose K DownServes.
GemmGrid DownGrid(int64_t out_cols, int64_t max_tiles);

}  // namespace gfx942
}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve
#endif  // !__HIP_DEVICE_COMPILE__

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_GFX942_MOE_MOE_GFX942_LAUNCH_H_
