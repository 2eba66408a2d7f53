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

// The code-object checks (moe_gfx942_hip_test, moe_gemm_m64_gfx942_hip_test)
// hold the kernels' argument segment to this struct's size.
TEST(Gfx942MoeLaunch, TheFiguresTheDecodeCodeObjectIsHeldTo) {
  EXPECT_EQ(sizeof(GemmParams), 120u);
  EXPECT_EQ(kThreads, 4 * 64);
  EXPECT_EQ(kCtaCols, 4 * 16);
  EXPECT_EQ(kTileRows, 16);
  const CtaShape plain = CtaOf(kTileRows, false), swiglu = CtaOf(kTileRows, true);
  // The slab staging: 16 activation rows of 64 bf16 k and 64 (SwiGLU: 128)
  // weight rows of 32 bytes of nibbles, rows padded by 16 bytes, two scale
  // bytes per weight row; two buffers.
  EXPECT_EQ(kKSlab % kKMultiple, 0);
  EXPECT_EQ(AStageBytes(plain), 16 * (64 * 2 + 16));
  EXPECT_EQ(SlabBytes(plain), 2304 + 64 * 48 + 64 * 2);
  EXPECT_EQ(SlabBytes(swiglu), 2304 + 128 * 48 + 128 * 2);
  EXPECT_EQ(LdsBytes(plain), 11008);  // moe_gfx942_hip_test's LDS limit is the SwiGLU kernel's
  EXPECT_EQ(LdsBytes(swiglu), 17408);
  EXPECT_EQ(SlabBytes(swiglu) % 16, 0);  // 16-byte LDS stores in the second buffer too
  // Three CTAs of four waves per CU: the SwiGLU kernel's LDS fits three
  // times in 64 KiB, not four; three waves per SIMD leave 512 / 3 registers,
  // 168 in granules of 8 (the code-object limit).
  EXPECT_LE(3 * LdsBytes(swiglu), 64 * 1024);
  EXPECT_GT(4 * LdsBytes(swiglu), 64 * 1024);
  EXPECT_EQ(kWavesPerSimd, 3 * kThreads / 64 / 4);
  EXPECT_EQ(WavesPerSimd(kTileRows), kWavesPerSimd);
  EXPECT_EQ(kMaxRegs, 512 / kWavesPerSimd / 8 * 8);
  // A slab's 16-byte pieces over the 256 threads: one each (bf16, fp32) or
  // 384 (SwiGLU: two loads for the first half of the CTA).
  EXPECT_EQ(16 * kKSlab / 8 + WeightRows(plain) * 2, kThreads);
  EXPECT_EQ(16 * kKSlab / 8 + WeightRows(swiglu) * 2, kThreads + kThreads / 2);
  // One MFMA tile per wave, the waves side by side along the columns.
  for (bool sw : {false, true}) {
    EXPECT_EQ(WaveRowTiles(CtaOf(kTileRows, sw)), 1);
    EXPECT_EQ(WaveColTiles(CtaOf(kTileRows, sw)), 1);
  }
}

TEST(Gfx942MoeLaunch, TheFiguresThePrefillCodeObjectIsHeldTo) {
  EXPECT_EQ(kPrefillTileRows, 64);
  const CtaShape plain = CtaOf(kPrefillTileRows, false), swiglu = CtaOf(kPrefillTileRows, true);
  // Every epilogue stages 64 activation rows and 128 weight rows per slab.
  EXPECT_EQ(plain.out_cols, 128);
  EXPECT_EQ(swiglu.out_cols, 64);
  EXPECT_EQ(WeightRows(plain), 128);
  EXPECT_EQ(WeightRows(swiglu), 128);
  EXPECT_EQ(AStageBytes(plain), 64 * 144);
  EXPECT_EQ(SlabBytes(plain), 9216 + 128 * 48 + 128 * 2);
  EXPECT_EQ(SlabBytes(swiglu), SlabBytes(plain));
  EXPECT_EQ(SlabBytes(plain) % 16, 0);
  EXPECT_EQ(LdsBytes(plain), 31232);  // moe_gemm_m64_gfx942_hip_test's LDS limit
  // Two CTAs per CU, not three: two waves per SIMD, 256 VGPR + AGPR per lane.
  EXPECT_LE(2 * LdsBytes(plain), 64 * 1024);
  EXPECT_GT(3 * LdsBytes(plain), 64 * 1024);
  EXPECT_EQ(kPrefillWavesPerSimd, 2 * kThreads / 64 / 4);
  EXPECT_EQ(WavesPerSimd(kPrefillTileRows), kPrefillWavesPerSimd);
  EXPECT_EQ(kPrefillMaxRegs, 512 / kPrefillWavesPerSimd);
  // Three 16-byte pieces per thread (two of activations, one of weights)
  // and one scale byte each.
  EXPECT_EQ(64 * kKSlab / 8 + WeightRows(plain) * 2, 3 * kThreads);
  EXPECT_EQ(WeightRows(plain) * kKSlab / kKMultiple, kThreads);
  // A 2 x 2 grid of waves, 2 row tiles x 4 output-column tiles each (2 x 2
  // and their up tiles under SwiGLU).
  EXPECT_EQ(WaveRowTiles(plain), 2);
  EXPECT_EQ(WaveColTiles(plain), 4);
  EXPECT_EQ(WaveColTiles(swiglu), 2);
}

// Each MFMA tile of the CTA (row tile x column tile) is computed by exactly
// one wave; every A row and output column of the CTA is one of them.
TEST(Gfx942MoeLaunch, TheWavesTileTheCtaOnce) {
  for (int rows : {kTileRows, kPrefillTileRows}) {
    for (bool sw : {false, true}) {
      SCOPED_TRACE(testing::Message() << rows << (sw ? " swiglu" : ""));
      const CtaShape s = CtaOf(rows, sw);
      std::vector<int> seen(s.rows * s.out_cols, 0);
      for (int wave = 0; wave < kThreads / 64; ++wave) {
        for (int m = 0; m < WaveRowTiles(s); ++m) {
          for (int n = 0; n < WaveColTiles(s); ++n) {
            for (int lr = 0; lr < 16; ++lr) {
              ASSERT_EQ(WaveRow(s, wave, m, lr), WaveRow(s, wave, m, 0) + lr);
              ASSERT_EQ(WaveRow(s, wave, m, 0) % 16, 0);
              for (int lc = 0; lc < 16; ++lc) {
                const int r = WaveRow(s, wave, m, lr), c = WaveCol(s, wave, n, lc);
                ASSERT_LT(r, s.rows);
                ASSERT_LT(c, s.out_cols);
                ++seen[r * s.out_cols + c];
              }
            }
          }
        }
      }
      for (int x : seen) ASSERT_EQ(x, 1);
      // The up columns (out_cols + c) are the slab's other weight rows.
      EXPECT_EQ(WeightRows(s), sw ? 2 * s.out_cols : s.out_cols);
    }
  }
}

TEST(Gfx942MoeLaunch, SlabPiecesCoverEveryActivationAndWeightByteOnce) {
  // The kernel's LoadSlab and StoreSlab move pieces t + 256 i of
  // SlabPieceAt: every (row, k) of the slab's activations and weights is
  // moved once, to the offset the MFMA operands are read from, and nothing
  // lands in the padding or the scales.
  for (int rows : {kTileRows, kPrefillTileRows}) {
    for (bool swiglu : {false, true}) {
      SCOPED_TRACE(testing::Message() << rows << (swiglu ? " swiglu" : " bf16/f32"));
      const CtaShape s = CtaOf(rows, swiglu);
      const int w_rows = WeightRows(s);
      std::vector<int> a_seen(rows * kKSlab, 0), w_seen(w_rows * kKSlab, 0), lds(SlabBytes(s), 0);
      const int loads = (rows * kKSlab / 8 + 2 * w_rows + kThreads - 1) / kThreads;
      for (int pc = 0; pc < loads * kThreads; ++pc) {
        const SlabPiece sp = SlabPieceAt(s, pc);
        if (sp.kind == kNone) continue;
        ASSERT_EQ(sp.lds % 16, 0) << pc;  // a 16-byte LDS store
        for (int b = 0; b < 16; ++b) ++lds[sp.lds + b];
        if (sp.kind == kActivation) {
          ASSERT_LT(sp.row, rows);
          for (int j = 0; j < 8; ++j) ++a_seen[sp.row * kKSlab + sp.k + j];
          // The A operand of k-step ks, lane (lr, lq) reads row WaveRow at byte (16 ks + 4 lq) * 2.
          EXPECT_EQ(sp.lds, sp.row * kARowBytes + sp.k * 2);
        } else {
          ASSERT_LT(sp.row, w_rows);
          for (int j = 0; j < 32; ++j) ++w_seen[sp.row * kKSlab + sp.k + j];
          // WeightOperand reads row r's nibbles of k at AStageBytes + r * kWRowBytes + k / 2.
          EXPECT_EQ(sp.lds, AStageBytes(s) + sp.row * kWRowBytes + sp.k / 2);
        }
      }
      for (int x : a_seen) ASSERT_EQ(x, 1);
      for (int x : w_seen) ASSERT_EQ(x, 1);
      for (int b = 0; b < SlabBytes(s); ++b) ASSERT_LE(lds[b], 1) << b;
      // The scales follow the weight rows, one byte per (row, 32-k block), all within the slab.
      EXPECT_EQ(SlabScaleLds(s, 0), AStageBytes(s) + w_rows * kWRowBytes);
      EXPECT_EQ(SlabScaleLds(s, 2 * w_rows - 1), SlabBytes(s) - 1);
      EXPECT_EQ(lds[SlabScaleLds(s, 0)], 0);
    }
  }
}

// The tile choice: 64-row tiles at many rows per expert, a K of two slabs
// and 128 weight rows; 16 otherwise.
TEST(Gfx942MoeLaunch, SelectTileRowsTakesThePrefillTileOnlyWhereItsConditionsHold) {
  // The seed's Kimi-K3 TP8 shapes: decode (1.0 and 1.3 rows per expert) and
  // chunked prefill (146 and 293), gate/up (K 3584 over 768 weight rows) and
  // down (K 384 over 3584).
  for (double r : {1.0, 512.0 / 394}) {
    EXPECT_EQ(SelectTileRows(r, 3584, 768), kTileRows) << r;
    EXPECT_EQ(SelectTileRows(r, 384, 3584), kTileRows) << r;
  }
  for (double r : {131072.0 / 896, 262144.0 / 896}) {
    EXPECT_EQ(SelectTileRows(r, 3584, 768), kPrefillTileRows) << r;
    EXPECT_EQ(SelectTileRows(r, 384, 3584), kPrefillTileRows) << r;
  }
  // Each condition at its edge.
  EXPECT_EQ(SelectTileRows(kPrefillMinRowsPerExpert, 3584, 768), kPrefillTileRows);
  EXPECT_EQ(SelectTileRows(kPrefillMinRowsPerExpert - 0.01, 3584, 768), kTileRows);
  EXPECT_EQ(SelectTileRows(1000, kPrefillMinK, 768), kPrefillTileRows);
  EXPECT_EQ(SelectTileRows(1000, kPrefillMinK - kKMultiple, 768), kTileRows);
  EXPECT_EQ(SelectTileRows(1000, 3584, 128), kPrefillTileRows);
  EXPECT_EQ(SelectTileRows(1000, 3584, 96), kTileRows);
  EXPECT_EQ(SelectTileRows(0, 3584, 768), kTileRows);  // no pairs
}

TEST(Gfx942MoeLaunch, PlanRoutesEachStageByItsFirstGemm) {
  // Decode: 16-row tiles for every stage.
  for (MoeStage s : {MoeStage::kGateUp, MoeStage::kDown, MoeStage::kLayer}) {
    const MoePlan plan = Plan(KimiMoeParams(s, 8));
    EXPECT_FALSE(plan.wgmma_rs);
    EXPECT_FALSE(plan.stream);
    EXPECT_EQ(plan.TileRows(), kTileRows);
  }
  const MoeWorkspace w = MoeWorkspaceLayout(KimiMoeParams(MoeStage::kLayer, 8), Plan(KimiMoeParams(MoeStage::kLayer, 8)));
  EXPECT_EQ(w.max_tiles, (8 * 16 + 15) / 16 + 128);  // ceil(pairs / 16) + min(pairs, E)
  // Chunked prefill: 64-row tiles, the workspace sized for them.
  for (MoeStage s : {MoeStage::kGateUp, MoeStage::kDown, MoeStage::kLayer}) {
    const MoeParams p = KimiMoeParams(s, 8192);
    EXPECT_EQ(Plan(p).TileRows(), kPrefillTileRows);
    const MoeWorkspace wp = MoeWorkspaceLayout(p, Plan(p));
    EXPECT_EQ(wp.max_tiles, (8192 * 16 + 63) / 64 + 896);
  }
  // The stage's own K and weight rows: a down whose K (I) is one slab stays
  // on 16-row tiles where its gate/up (K = hidden) takes 64.
  MoeParams p = KimiMoeParams(MoeStage::kDown, 8192);
  p.inter = 64;
  EXPECT_EQ(Plan(p).TileRows(), kTileRows);
  p.stage = MoeStage::kGateUp;
  EXPECT_EQ(Plan(p).TileRows(), kPrefillTileRows);
  // A layer follows its gate/up.
  p.stage = MoeStage::kLayer;
  EXPECT_EQ(Plan(p).TileRows(), kPrefillTileRows);
}

TEST(Gfx942MoeLaunch, GridCoversTheColumnsAndEveryTile) {
  const GemmGrid g = Grid(CtaOf(kTileRows, false), 384, 136);
  EXPECT_EQ(g.x, 6u);
  EXPECT_EQ(g.y, 136u);
  EXPECT_EQ(Grid(CtaOf(kTileRows, true), 385, 1).x, 7u);
  // The prefill CTA: 128 columns, 64 under SwiGLU.
  EXPECT_EQ(Grid(CtaOf(kPrefillTileRows, false), 3584, 2176).x, 28u);
  EXPECT_EQ(Grid(CtaOf(kPrefillTileRows, false), 3585, 2176).x, 29u);
  EXPECT_EQ(Grid(CtaOf(kPrefillTileRows, false), 3584, 2176).y, 2176u);
  EXPECT_EQ(Grid(CtaOf(kPrefillTileRows, true), 384, 1).x, 6u);
}

TEST(Gfx942MoeLaunch, EachTileAndEpilogueHasItsKernel) {
  EXPECT_STREQ(GemmKernel(kTileRows, kEpiBf16), kGemmBf16);
  EXPECT_STREQ(GemmKernel(kTileRows, kEpiSwiglu), kGemmSwiglu);
  EXPECT_STREQ(GemmKernel(kTileRows, kEpiF32), kGemmF32);
  EXPECT_STREQ(GemmKernel(kPrefillTileRows, kEpiBf16), "KsMoeGemmMxfp4Gfx942M64Bf16");
  EXPECT_STREQ(GemmKernel(kPrefillTileRows, kEpiSwiglu), "KsMoeGemmMxfp4Gfx942M64Swiglu");
  EXPECT_STREQ(GemmKernel(kPrefillTileRows, kEpiF32), "KsMoeGemmMxfp4Gfx942M64F32");
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
