// The gfx942 MoE GEMM launch on the CPU: its slab staging's LDS map and
// occupancy, its routing tile, grid and the shapes it serves.
#include "kernels/gpu/arch/gfx942/moe/moe_gfx942_launch.h"

#include <vector>

#include "gtest/gtest.h"
#include "kernels/api/ops.h"
#include "kernels/gpu/launch_test_fixtures.h"
#include "kernels/gpu/moe/moe_params.h"
#include "kernels/gpu/moe/moe_plan.h"

namespace kernelserve {
namespace gpu {
namespace moe {
namespace gfx942 {
namespace {

using gpu_test::KimiMoeParams;

// The code-object check (moe_gfx942_hip_test) holds the kernels' argument
// segment to this struct's size.
TEST(Gfx942MoeLaunch, TheFiguresTheCodeObjectIsHeldTo) {
  EXPECT_EQ(sizeof(GemmParams), 112u);
  EXPECT_EQ(kThreads, 4 * 64);
  EXPECT_EQ(kCtaCols, 4 * 16);
  EXPECT_EQ(kTileRows, 16);
  // The slab staging: 16 activation rows of 64 bf16 k and 64 (SwiGLU: 128)
  // weight rows of 32 bytes of nibbles, rows padded by 16 bytes, two scale
  // bytes per weight row; two buffers.
  EXPECT_EQ(kKSlab % kKMultiple, 0);
  EXPECT_EQ(kAStageBytes, 16 * (64 * 2 + 16));
  EXPECT_EQ(SlabBytes(false), 2304 + 64 * 48 + 64 * 2);
  EXPECT_EQ(SlabBytes(true), 2304 + 128 * 48 + 128 * 2);
  EXPECT_EQ(LdsBytes(false), 11008);  // moe_gfx942_hip_test's LDS limit is the SwiGLU kernel's
  EXPECT_EQ(LdsBytes(true), 17408);
  EXPECT_EQ(SlabBytes(true) % 16, 0);  // 16-byte LDS stores in the second buffer too
  // Three CTAs of four waves per CU: the SwiGLU kernel's LDS fits three
  // times in 64 KiB, not four; three waves per SIMD leave 512 / 3 registers,
  // 168 in granules of 8 (the code-object limit).
  EXPECT_LE(3 * LdsBytes(true), 64 * 1024);
  EXPECT_GT(4 * LdsBytes(true), 64 * 1024);
  EXPECT_EQ(kWavesPerSimd, 3 * kThreads / 64 / 4);
  EXPECT_EQ(kMaxRegs, 512 / kWavesPerSimd / 8 * 8);
  // A slab's 16-byte pieces over the 256 threads: one each (bf16, fp32) or
  // 384 (SwiGLU: two loads for the first half of the CTA).
  EXPECT_EQ(16 * kKSlab / 8 + WeightRows(false) * 2, kThreads);
  EXPECT_EQ(16 * kKSlab / 8 + WeightRows(true) * 2, kThreads + kThreads / 2);
}

TEST(Gfx942MoeLaunch, SlabPiecesCoverEveryActivationAndWeightByteOnce) {
  // The kernel's LoadSlab and StoreSlab move pieces t + 256 i of
  // SlabPieceAt: every (row, k) of the slab's activations and weights is
  // moved once, to the offset the MFMA operands are read from, and nothing
  // lands in the padding or the scales.
  for (bool swiglu : {false, true}) {
    SCOPED_TRACE(swiglu ? "swiglu" : "bf16/f32");
    const int w_rows = WeightRows(swiglu);
    std::vector<int> a_seen(16 * kKSlab, 0), w_seen(w_rows * kKSlab, 0), lds(SlabBytes(swiglu), 0);
    const int loads = (16 * kKSlab / 8 + 2 * w_rows + kThreads - 1) / kThreads;
    for (int pc = 0; pc < loads * kThreads; ++pc) {
      const SlabPiece sp = SlabPieceAt(swiglu, pc);
      if (sp.kind == kNone) continue;
      ASSERT_EQ(sp.lds % 16, 0) << pc;  // a 16-byte LDS store
      for (int b = 0; b < 16; ++b) ++lds[sp.lds + b];
      if (sp.kind == kActivation) {
        ASSERT_LT(sp.row, 16);
        for (int j = 0; j < 8; ++j) ++a_seen[sp.row * kKSlab + sp.k + j];
        // The A operand of k-step ks, lane (lr, lq) reads row lr at byte (16 ks + 4 lq) * 2.
        EXPECT_EQ(sp.lds, sp.row * kARowBytes + sp.k * 2);
      } else {
        ASSERT_LT(sp.row, w_rows);
        for (int j = 0; j < 32; ++j) ++w_seen[sp.row * kKSlab + sp.k + j];
        // WeightOperand reads row r's nibbles of k at kAStageBytes + r * kWRowBytes + k / 2.
        EXPECT_EQ(sp.lds, kAStageBytes + sp.row * kWRowBytes + sp.k / 2);
      }
    }
    for (int x : a_seen) ASSERT_EQ(x, 1);
    for (int x : w_seen) ASSERT_EQ(x, 1);
    for (int b = 0; b < SlabBytes(swiglu); ++b) ASSERT_LE(lds[b], 1) << b;
    // The scales follow the weight rows, one byte per (row, 32-k block), all within the slab.
    EXPECT_EQ(SlabScaleLds(swiglu, 0), kAStageBytes + w_rows * kWRowBytes);
    EXPECT_EQ(SlabScaleLds(swiglu, 2 * w_rows - 1), SlabBytes(swiglu) - 1);
    EXPECT_EQ(lds[SlabScaleLds(swiglu, 0)], 0);
  }
}

TEST(Gfx942MoeLaunch, SixteenRowRoutingTilesForEveryStage) {
  const MoePlan plan = Plan();
  EXPECT_EQ(plan.wgmma_rows, 0);
  EXPECT_EQ(plan.TileRows(), kTileRows);
  const MoeWorkspace w = MoeWorkspaceLayout(KimiMoeParams(MoeStage::kLayer, 8), plan);
  EXPECT_EQ(w.max_tiles, (8 * 16 + 15) / 16 + 128);  // ceil(pairs / 16) + min(pairs, E)
}

TEST(Gfx942MoeLaunch, GridCoversTheColumnsAndEveryTile) {
  const GemmGrid g = Grid(384, 136);
  EXPECT_EQ(g.x, 6u);
  EXPECT_EQ(g.y, 136u);
  EXPECT_EQ(Grid(385, 1).x, 7u);
}

// The down kernel (moe_down_mxfp4.hip): the figures its code object is held
// to (moe_down_gfx942_hip_test), the K it serves, its grid.
TEST(Gfx942MoeDownLaunch, TheFiguresTheCodeObjectIsHeldTo) {
  EXPECT_EQ(kDownLdsBytes, 16 * (768 * 2 + 16));
  EXPECT_EQ(kDownLdsBytes, 24832);
  // Two CTAs of four waves in a CU's 64 KiB, not three: two waves per SIMD,
  // 256 VGPR + AGPR per lane.
  EXPECT_LE(2 * kDownLdsBytes, 64 * 1024);
  EXPECT_GT(3 * kDownLdsBytes, 64 * 1024);
  EXPECT_EQ(kDownWavesPerSimd, 2 * kThreads / 64 / 4);
  EXPECT_EQ(kDownMaxRegs, 512 / kDownWavesPerSimd);
  // The A operands of every k-step in registers fit beside the rest: 2
  // VGPRs per k-step at the largest K.
  EXPECT_EQ(kDownMaxK / 16 * 2, 96);
  EXPECT_EQ(kDownCtaCols % (16 * 4 * kDownTilesPerStep), 0);  // whole steps of column tiles per wave
}

TEST(Gfx942MoeDownLaunch, ServesMultiplesOf128UpTo768) {
  for (int k : {128, 256, 384, 512, 640, 768}) EXPECT_TRUE(DownServes(k)) << k;
  for (int k : {0, 32, 96, 416, 800, 896, 1024, 3584}) EXPECT_FALSE(DownServes(k)) << k;
  const GemmGrid g = DownGrid(3584, 136);
  EXPECT_EQ(g.x, 14u);
  EXPECT_EQ(g.y, 136u);
  EXPECT_EQ(DownGrid(3585, 1).x, 15u);
}

// A lane's k order: the MFMA sums over the k its lanes feed, so A and B (the
// same DownK) must cover each k of K once; a quarter's k of a block are the
// 32 its one 16-byte weight load holds, under its one scale.
TEST(Gfx942MoeDownLaunch, TheKOrderCoversKOnceAndMatchesTheWeightLoads) {
  for (int k : {128, 384, 768}) {
    std::vector<int> seen(k, 0);
    for (int ks = 0; ks < k / 16; ++ks) {
      for (int lq = 0; lq < 4; ++lq) {
        for (int i = 0; i < 4; ++i) {
          const int kk = DownK(ks, lq, i);
          ASSERT_GE(kk, 0);
          ASSERT_LT(kk, k);
          ++seen[kk];
          const int j = ks / 8, s = ks % 8;
          // The nibbles: byte kk / 2 of the row, element kk in its low nibble when even; the
          // kernel's load for (j, lq) starts at DownWeightByte and step s reads its bytes 2 s, 2 s + 1.
          EXPECT_EQ(kk / 2, DownWeightByte(j, lq) + 2 * s + i / 2);
          EXPECT_EQ(kk % 2, i % 2);
          EXPECT_EQ(DownWeightByte(j, lq) % 16, 0);  // a 16-byte load
          // The scale: one per 32 k.
          EXPECT_EQ(kk / 32, DownScaleBlock(j, lq));
        }
      }
    }
    for (int x : seen) ASSERT_EQ(x, 1);
  }
}

TEST(Gfx942MoeDownLaunch, StepBytesAreThoseOfTheStepsK) {
  // A block's 16 bytes of one quarter as the load's four words; each byte b
  // holds code b in its low nibble and 15 - b in its high one.
  uint32_t words[4] = {};
  for (int b = 0; b < 16; ++b) words[b / 4] |= static_cast<uint32_t>(b | (15 - b) << 4) << (8 * (b % 4));
  for (int s = 0; s < 8; ++s) {
    const uint32_t two = DownStepBytes(words[s / 2], s);
    for (int i = 0; i < 4; ++i) {
      // Element i of step s is k = DownK(s, 0, i): byte 2 s + i / 2, the low nibble when i is even.
      const int byte = 2 * s + i / 2;
      const uint32_t want = i % 2 == 0 ? byte : 15 - byte;
      EXPECT_EQ((two >> (4 * i)) & 0xFu, want) << "step " << s << " element " << i;
    }
  }
}

TEST(Gfx942MoeLaunch, ServesTheSeedShapesAndSaysWhyNotOthers) {
  for (MoeStage s : {MoeStage::kGateUp, MoeStage::kDown, MoeStage::kLayer}) EXPECT_EQ(Unsupported(KimiMoeParams(s, 32)), "");
  MoeParams p = KimiMoeParams(MoeStage::kGateUp, 8);
  p.hidden = 3600;
  EXPECT_EQ(Unsupported(p), "moe: the hip backend needs K (hidden) % 32 == 0");
  p = KimiMoeParams(MoeStage::kDown, 8);
  p.inter = 200;
  EXPECT_EQ(Unsupported(p), "moe: the hip backend needs I % 32 == 0 for down");
  p = KimiMoeParams(MoeStage::kGateUp, 8);
  p.experts = 5000;
  EXPECT_EQ(Unsupported(p), "moe: the hip backend serves at most 4096 experts");
}

}  // namespace
}  // namespace gfx942
}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve
