#include "kernels/gpu/moe/moe_plan.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/gpu/moe/moe_params.h"

namespace kernelserve {
namespace gpu {
namespace moe {
namespace {

// Below this many rows per expert the weights stream (PlanMoe).
constexpr double kStreamRowsBelow = 12;
// From this many rows per expert down runs on wgmma_rs.
constexpr double kRsDownRowsFrom = 64;

}  // namespace

double RowsPerExpert(const MoeParams& p) {
  const int64_t pairs = p.tokens * p.top_k;
  const int64_t active = std::min(pairs, p.experts);
  return active > 0 ? static_cast<double>(pairs) / static_cast<double>(active) : 0.0;
}

int RsStreamCols(const MoeParams& p) { return RowsPerExpert(p) < kRsRows ? kRsStreamCols : 1; }

MoePlan PlanMoe(const MoeParams& p) {
  const double rows = RowsPerExpert(p);
  MoePlan plan;
  if (rows < kStreamRowsBelow) {
    plan.stream = true;
  } else if (p.stage != MoeStage::kDown || rows >= kRsDownRowsFrom) {
    plan.wgmma_rs = true;
    plan.rs_b_resident = true;
    plan.rs_stream_cols = RsStreamCols(p);
  }
  return plan;
}

std::string MoeUnsupported(const MoeParams& p, const MoePlan& plan) {
  if (plan.stream && plan.wgmma_rs) return "moe: a plan streams the weights or runs wgmma_rs, not both";
  if (plan.rs_b_resident && !plan.wgmma_rs) return "moe: a resident B tile is wgmma_rs's";
  if (plan.rs_resident_cols < 1 || plan.rs_stream_cols < 1) return "moe: a wgmma_rs CTA walks at least one column tile";
  if (!plan.stream && !plan.wgmma_rs && plan.mma_rows != 64) {
    return absl::StrCat("moe: the mma.sync kernel has 64-row tiles, not ", plan.mma_rows);
  }
  if (p.experts > kMaxExperts) return "moe: the cuda backend serves at most 4096 experts";
  if (p.stage != MoeStage::kDown && p.hidden % kKMultiple != 0) {
    return "moe: the cuda backend needs K (hidden) % 128 == 0";
  }
  if (p.stage != MoeStage::kGateUp && p.inter % kKMultiple != 0) {
    return "moe: the cuda backend needs I % 128 == 0 for down";
  }
  if (p.stage != MoeStage::kGateUp && p.out_dim % 2 != 0) return "moe: the cuda backend needs an even N";
  if (p.inter % 2 != 0) return "moe: the cuda backend needs an even I";
  if (p.tokens * p.top_k >= (int64_t{1} << 31) / 128) return "moe: too many (token, expert) pairs";
  // The wgmma_rs producer keeps 32-bit 16-byte-chunk offsets into A.
  const int64_t a_rows = p.stage == MoeStage::kDown ? p.tokens * p.top_k : p.tokens;
  const int64_t a_k = p.stage == MoeStage::kDown ? p.inter : p.hidden;
  if (plan.wgmma_rs && a_rows * (a_k / 8) >= (int64_t{1} << 32)) {
    return "moe: the wgmma_rs kernel addresses at most 2^32 16-byte chunks of activations";
  }
  return "";
}

MoeWorkspace MoeWorkspaceLayout(const MoeParams& p, const MoePlan& plan) {
  auto align = [](size_t x) { return (x + 255) & ~size_t{255}; };
  const int64_t pairs = p.tokens * p.top_k;
  const int64_t bm = plan.TileRows();
  const size_t e = static_cast<size_t>(p.experts);
  const bool need_y = p.stage == MoeStage::kLayer || (p.stage == MoeStage::kDown && p.weighted_sum);
  const bool need_h = p.stage == MoeStage::kLayer;
  MoeWorkspace w;
  w.max_tiles = (pairs + bm - 1) / bm + std::min(pairs, p.experts);
  const size_t tiles = static_cast<size_t>(w.max_tiles);
  w.counts = 0;
  w.cursor = w.counts + 4 * e;
  w.tile_start = w.cursor + 4 * e;
  w.tile_expert = w.tile_start + 4 * e;
  w.tile_rows = w.tile_expert + 4 * tiles;
  w.num_tiles = w.tile_rows + 4 * tiles;
  w.sorted = align(w.num_tiles + 4);
  w.h = align(w.sorted + tiles * bm * 4);
  w.y = align(w.h + (need_h ? static_cast<size_t>(pairs) * p.inter * 2 : 0));
  w.bytes = w.y + (need_y ? static_cast<size_t>(pairs) * p.out_dim * 4 : 0);
  return w;
}

}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve
