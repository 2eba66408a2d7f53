#include "kernels/gpu/arch/gfx942/moe/moe_gfx942_launch.h"

#include "absl/strings/str_cat.h"
#include "kernels/gpu/moe/moe_params.h"
#include "kernels/gpu/moe/moe_plan.h"

namespace kernelserve {
namespace gpu {
namespace moe {
namespace gfx942 {

int SelectTileRows(double rows_per_expert, int64_t k, int64_t weight_rows) {
  const bool prefill = rows_per_expert >= kPrefillMinRowsPerExpert && weight_rows >= WeightRows(CtaOf(kPrefillTileRows, false)) &&
                       k >= kPrefillMinK;
  return prefill ? kPrefillTileRows : kTileRows;
}

MoePlan Plan(const MoeParams& p) {
  const bool down = p.stage == MoeStage::kDown;
  MoePlan plan;
  plan.mma_rows = SelectTileRows(RowsPerExpert(p), down ? p.inter : p.hidden, down ? p.hidden : 2 * p.inter);
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

GemmGrid Grid(const CtaShape& s, int64_t out_cols, int64_t max_tiles) {
  return ColumnsByTiles(out_cols, s.out_cols, max_tiles);
}

const char* GemmKernel(int tile_rows, int epilogue) {
  const bool prefill = tile_rows == kPrefillTileRows;
  return epilogue == kEpiSwiglu ? (prefill ? kPrefillSwiglu : kGemmSwiglu)
         : epilogue == kEpiF32  ? (prefill ? kPrefillF32 : kGemmF32)
                                : (prefill ? kPrefillBf16 : kGemmBf16);
}

GemmGrid DownGrid(int64_t out_cols, int64_t max_tiles) { return ColumnsByTiles(out_cols, kDownCtaCols, max_tiles); }

}  // namespace gfx942
}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve
