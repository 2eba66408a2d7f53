// The down projection of MXFP4 MoE for gfx942 (MI300X) at a short K (the
// expert width I: the seed's down kernel for I = 384/512/768): bf16
// activations against E2M1 weights with one E8M0 scale per 32 k, on
// v_mfma_f32_16x16x16bf16_1k, over the routing's 16-pair expert tiles
// (moe_params.h's GemmParams, as the gate/up kernel reads them). Two
// epilogues: bf16 per pair (down alone) and fp32 per pair (the weighted
// per-token sum's input).
//
// A CTA is one routing tile x kDownCtaCols (256) output columns, four
// wave64s. The K of down is short, so instead of walking it in slabs the
// CTA stages the tile's whole A (16 rows x K bf16, 16-byte loads and
// stores) in LDS once: one barrier for the whole GEMM. Each wave then
// reads its A operands for every k-step from LDS into registers (K / 16
// k-steps x 2 VGPRs: 96 at K = 768) and sweeps its four 16-column tiles
// against them, two at a time, streaming the weights from global memory:
// a weight is used by one lane of one MFMA, so staging it would gain
// nothing. The k order within each 128-k block is permuted (DownK, the
// same for A and B) so that a lane's weight nibbles for the block are one
// 16-byte load under one scale byte, instead of a 2-byte load per k-step.
//
// Occupancy (checked on the code object by moe_down_gfx942_hip_test): LDS
// is sized for K = 768, 24832 bytes, so two CTAs per CU, two waves per
// SIMD: VGPR + AGPR <= 256 per lane. No scratch: the A operands are indexed
// only by unrolled loop counters, the blocks past K skipped by a uniform
// branch.
#include <cstdint>

#include "kernels/gpu/arch/gfx942/mfma.h"
#include "kernels/gpu/arch/gfx942/moe/moe_gfx942_launch.h"
#include "kernels/gpu/arch/gfx942/moe/mxfp4_device.h"
#include "kernels/gpu/common/gpu.h"
#include "kernels/gpu/moe/moe_params.h"

namespace kernelserve {
namespace gpu {
namespace moe {
namespace gfx942 {

using gpu::gfx942::Mfma;

constexpr int kMaxBlocks = kDownMaxK / kDownKBlock;  // 6
constexpr int kStepsPerBlock = kDownKBlock / 16;     // 8 MFMA k-steps
constexpr int kTilesPerWave = kDownCtaCols / 16 / 4;  // 4
static_assert(kTilesPerWave % kDownTilesPerStep == 0, "a wave's column tiles in whole steps");
static_assert(kDownKBlock / 4 / 2 == 16, "a lane quarter's nibbles of a block are 16 bytes");

// One output column's weights for this lane quarter: a 16-byte load and a
// scale per 128-k block (zeros past out_cols; the column is then not written).
struct ColumnWeights {
  U32x4 nibbles[kMaxBlocks];
  float scale[kMaxBlocks];
};

__device__ __forceinline__ void LoadColumn(const GemmParams& p, int64_t e, int col, int lq, int blocks,
                                           ColumnWeights& w) {
  const bool ok = col < p.out_cols;
  const int64_t row = e * p.nw + col;
#pragma unroll
  for (int j = 0; j < kMaxBlocks; ++j) {
    if (j >= blocks) break;
    w.nibbles[j] = ok ? LoadGlobal16(p.w + row * (p.k / 2) + DownWeightByte(j, lq)) : U32x4{0u, 0u, 0u, 0u};
    w.scale[j] = ok ? E8m0(p.ws[row * (p.k / 32) + DownScaleBlock(j, lq)]) : 0.f;
  }
}

template <int kEpi>
__device__ __forceinline__ void DownCta(const GemmParams& p) {
  static_assert(kEpi != kEpiSwiglu, "down has no SwiGLU");
  __shared__ __attribute__((aligned(16))) uint8_t lds[kDownLdsBytes];
  const int tile = blockIdx.y;
  if (tile >= *p.num_tiles) return;
  const int lane = threadIdx.x & 63, wave = threadIdx.x >> 6;
  const int lr = lane & 15, lq = lane >> 4;
  const int k = static_cast<int>(p.k);  // DownServes(k): a multiple of 128, at most 768
  const int blocks = k / kDownKBlock;
  const int row_bytes = DownARowBytes(k);
  const int64_t e = p.tile_expert[tile];

  // The tile's A rows into LDS, 8 bf16 per 16-byte piece (zeros for padding pairs).
  const int pieces_per_row = k / 8;
  for (int pc = threadIdx.x; pc < kTileRows * pieces_per_row; pc += kThreads) {
    const int r = pc / pieces_per_row, c = pc % pieces_per_row;
    const int pair = p.sorted[tile * kTileRows + r];
    U32x4 x = U32x4{0u, 0u, 0u, 0u};
    if (pair >= 0) x = LoadGlobal16(p.a + static_cast<int64_t>(pair / p.a_row_div) * p.k + c * 8);
    *reinterpret_cast<U32x4*>(lds + r * row_bytes + c * 16) = x;
  }
  __syncthreads();

  // A operand of k-step 8 j + s: pair row lr of the tile at k = DownK(8 j + s, lq, 0..3).
  Bf16x4 a[kMaxBlocks][kStepsPerBlock];
#pragma unroll
  for (int j = 0; j < kMaxBlocks; ++j) {
    if (j >= blocks) break;
#pragma unroll
    for (int s = 0; s < kStepsPerBlock; ++s) {
      a[j][s] = *reinterpret_cast<const Bf16x4*>(lds + lr * row_bytes + DownK(j * kStepsPerBlock + s, lq, 0) * 2);
    }
  }

  const int col0 = blockIdx.x * kDownCtaCols;
#pragma unroll 1
  for (int t = 0; t < kTilesPerWave; t += kDownTilesPerStep) {
    int col[kDownTilesPerStep];
    ColumnWeights w[kDownTilesPerStep];
    F32x4 acc[kDownTilesPerStep];
#pragma unroll
    for (int u = 0; u < kDownTilesPerStep; ++u) {
      col[u] = col0 + ((t + u) * 4 + wave) * 16 + lr;
      LoadColumn(p, e, col[u], lq, blocks, w[u]);
      acc[u] = F32x4{0.f, 0.f, 0.f, 0.f};
    }
#pragma unroll
    for (int j = 0; j < kMaxBlocks; ++j) {
      if (j >= blocks) break;
#pragma unroll
      for (int s = 0; s < kStepsPerBlock; ++s) {
#pragma unroll
        for (int u = 0; u < kDownTilesPerStep; ++u) {
          const uint32_t two = DownStepBytes(w[u].nibbles[j][s / 2], s);
          acc[u] = Mfma(a[j][s], DecodeFp4x4(two, w[u].scale[j]), acc[u]);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kDownTilesPerStep; ++u) {
      if (col[u] < p.out_cols) StorePairOutputs<kEpi>(p, tile * kTileRows + 4 * lq, col[u], acc[u], acc[u]);
    }
  }
}

}  // namespace gfx942
}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve

// C names for hipModuleGetFunction. Two waves per SIMD: what the LDS allows.
#define KS_MOE_GFX942_DOWN(NAME, EPI)                                                                     \
  extern "C" __global__ void __attribute__((amdgpu_flat_work_group_size(256, 256),                        \
                                            amdgpu_waves_per_eu(kernelserve::gpu::moe::gfx942::kDownWavesPerSimd))) \
  NAME(const kernelserve::gpu::moe::GemmParams p) {                                                       \
    kernelserve::gpu::moe::gfx942::DownCta<EPI>(p);                                                       \
  }
KS_MOE_GFX942_DOWN(KsMoeDownMxfp4Gfx942Bf16, kernelserve::gpu::moe::kEpiBf16)
KS_MOE_GFX942_DOWN(KsMoeDownMxfp4Gfx942F32, kernelserve::gpu::moe::kEpiF32)
#undef KS_MOE_GFX942_DOWN
