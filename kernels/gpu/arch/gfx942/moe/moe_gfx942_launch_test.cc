// The gfx942 MoE GEMM launch on the CPU: its routing tile, grid and the
// shapes it serves.
#include "kernels/gpu/arch/gfx942/moe/moe_gfx942_launch.h"

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
