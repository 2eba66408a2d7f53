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

}  // namespace gfx942
}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve
#endif  // !__HIP_DEVICE_COMPILE__

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_GFX942_MOE_MOE_GFX942_LAUNCH_H_
