// The launch of the gfx942 MXFP4 MoE GEMM (moe_gemm_mxfp4.hip), as pure host
// functions tested on the CPU: the CTA shape the kernel is compiled for, the
// routing tile it reads, the grid of each projection, and which epilogue a
// call's stages take. The code object is held to the same figures by
// //kernels/gpu/arch/gfx942/moe:moe_gfx942_hip_test.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_GFX942_MOE_MOE_GFX942_LAUNCH_H_
#define KERNELSERVE_KERNELS_GPU_ARCH_GFX942_MOE_MOE_GFX942_LAUNCH_H_

#include <cstdint>

#include "kernels/gpu/common/host_device.h"

namespace kernelserve {
namespace gpu {
namespace moe {
namespace gfx942 {

constexpr int kThreads = 256;   // four wave64s
constexpr int kTileRows = 16;   // (token, expert) pairs per routing tile: one MFMA M-tile
constexpr int kCtaCols = 64;    // output columns per CTA: 16 per wave
constexpr int kKMultiple = 32;  // K steps of one E8M0 scale block

// K is walked in slabs of kKSlab, each staged in LDS (double-buffered) by
// the whole CTA with 16-byte loads: the tile's 16 activation rows (bf16),
// the CTA's weight rows (64, or 128 under SwiGLU: gate and up) as packed
// E2M1 nibbles, and their E8M0 scale bytes. Rows are padded by 16 bytes.
constexpr int kKSlab = 64;                                   // two scale blocks
constexpr int kARowBytes = kKSlab * 2 + 16;                  // 144
constexpr int kWRowBytes = kKSlab / 2 + 16;                  // 48
constexpr int kAStageBytes = kTileRows * kARowBytes;         // 2304
KS_HOST_DEVICE constexpr int WeightRows(bool swiglu) { return swiglu ? 2 * kCtaCols : kCtaCols; }
// One slab's buffer: activations, weight nibbles, scales (a byte per row and scale block).
KS_HOST_DEVICE constexpr int SlabBytes(bool swiglu) {
  return kAStageBytes + WeightRows(swiglu) * kWRowBytes + WeightRows(swiglu) * (kKSlab / kKMultiple);
}
// Two buffers: 11008 bytes (bf16 and fp32 epilogues), 17408 (SwiGLU).
KS_HOST_DEVICE constexpr int LdsBytes(bool swiglu) { return 2 * SlabBytes(swiglu); }
// Slab piece pc (16 bytes; thread t moves pieces t, t + kThreads, ...): the
// 16 activation rows first (8 pieces of 8 k per row), then the weight rows
// (2 pieces of 32 k per row). `row` is the tile's pair row or the CTA's
// weight row, `k` the first k in the slab, `lds` the byte offset in the
// slab's buffer; kind kNone past the slab's pieces.
enum SlabPieceKind : int { kNone = 0, kActivation = 1, kWeight = 2 };
struct SlabPiece {
  int kind, row, k, lds;
};
KS_HOST_DEVICE constexpr SlabPiece SlabPieceAt(bool swiglu, int pc) {
  constexpr int kAPieces = kTileRows * kKSlab / 8;
  return pc < kAPieces ? SlabPiece{kActivation, pc / 8, pc % 8 * 8, pc / 8 * kARowBytes + pc % 8 * 16}
         : pc < kAPieces + 2 * WeightRows(swiglu)
             ? SlabPiece{kWeight, (pc - kAPieces) / 2, (pc - kAPieces) % 2 * 32,
                         kAStageBytes + (pc - kAPieces) / 2 * kWRowBytes + (pc - kAPieces) % 2 * 16}
             : SlabPiece{kNone, 0, 0, 0};
}
// Scale byte t of a slab (t < WeightRows * 2): weight row t / 2, the 32-k
// block t % 2, at this offset of the slab's buffer.
KS_HOST_DEVICE constexpr int SlabScaleLds(bool swiglu, int t) {
  return kAStageBytes + WeightRows(swiglu) * kWRowBytes + t;
}

// Every epilogue is compiled for three CTAs (four waves each) per CU, three
// waves per SIMD: the SwiGLU kernel's LDS fits three times in 64 KiB, not
// four, and 512 / 3 leaves 168 VGPR + AGPR per lane (allocation granule 8).
constexpr int kWavesPerSimd = 3;
constexpr int kMaxRegs = 168;

// The GEMM's C names, one per epilogue (moe_params.h's Epilogue).
constexpr char kGemmBf16[] = "KsMoeGemmMxfp4Gfx942Bf16";
constexpr char kGemmSwiglu[] = "KsMoeGemmMxfp4Gfx942Swiglu";
constexpr char kGemmF32[] = "KsMoeGemmMxfp4Gfx942F32";

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

// The routing tiles this kernel reads: 16-row tiles for every stage.
MoePlan Plan();

// Empty when the kernel serves validated `p`, else why not.
std::string Unsupported(const MoeParams& p);

// Grid of one GEMM: (column blocks of kCtaCols output columns, routing tiles
// at most). CTAs past the routing's tile count return at once.
struct GemmGrid {
  unsigned x = 1, y = 1;
};
GemmGrid Grid(int64_t out_cols, int64_t max_tiles);

// The down kernel's grid: (column blocks of kDownCtaCols, routing tiles at
// most), for a call whose K DownServes.
GemmGrid DownGrid(int64_t out_cols, int64_t max_tiles);

}  // namespace gfx942
}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve
#endif  // !__HIP_DEVICE_COMPILE__

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_GFX942_MOE_MOE_GFX942_LAUNCH_H_
