#include "kernels/gpu/arch/gfx942/moe/moe_gfx942_launch.h"

#include "absl/strings/str_cat.h"
#include "kernels/gpu/moe/moe_params.h"

namespace kernelserve {
namespace gpu {
namespace moe {
namespace gfx942 {

MoePlan Plan() {
  MoePlan plan;
  plan.wgmma_rows = 0;
  plan.mma_rows = kTileRows;
  return plan;
}

std::string Unsupported(const MoeParams& p) {
  if (p.experts > kMaxExperts) return absl::StrCat("moe: the hip backend serves at most ", kMaxExperts, " experts");
  if (p.stage != MoeStage::kDown && p.hidden % kKMultiple != 0) {
    return absl::StrCat("moe: the hip backend needs K (hidden) % ", kKMultiple, " == 0");
  }
  if (p.stage != MoeStage::kGateUp && p.inter % kKMultiple != 0) {
    return absl::StrCat("moe: the hip backend needs I % ", kKMultiple, " == 0 for down");
  }
  if (p.tokens * p.top_k >= (int64_t{1} << 31) / kTileRows) return "moe: too many (token, expert) pairs";
  return "";
}

namespace {

GemmGrid ColumnsByTiles(int64_t out_cols, int64_t cta_cols, int64_t max_tiles) {
  GemmGrid g;
  g.x = static_cast<unsigned>((out_cols + cta_cols - 1) / cta_cols);
  g.y = static_cast<unsigned>(max_tiles);
  return g;
}

}  // namespace

GemmGrid Grid(int64_t out_cols, int64_t max_tiles) { return ColumnsByTiles(out_cols, kCtaCols, max_tiles); }

GemmGrid DownGrid(int64_t out_cols, int64_t max_tiles) { return ColumnsByTiles(out_cols, kDownCtaCols, max_tiles); }

}  // namespace gfx942
}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve
