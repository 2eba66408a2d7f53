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

// wgmma tilings of gate/up: rows per tile x weight rows per tile.
constexpr int kWgmmaTilings[][2] = {{128, 256}, {192, 192}};

}  // namespace

double RowsPerExpert(const MoeParams& p) {
  const int64_t pairs = p.tokens * p.top_k;
  const int64_t active = std::min(pairs, p.experts);
  return active > 0 ? static_cast<double>(pairs) / static_cast<double>(active) : 0.0;
}

MoePlan PlanMoe(const MoeParams& p) {
  const double rows = RowsPerExpert(p);
  MoePlan plan;
  if (rows < kStreamRowsBelow) {
    plan.stream = true;
    return plan;
  }
  plan.mma_rows = rows < 256 ? 64 : 128;
  if (p.stage != MoeStage::kGateUp || rows < 72) return plan;
  const int64_t nw = 2 * p.inter;  // weight rows; SwiGLU pairs them, same count
  double fewest = 0;
  for (const auto& t : kWgmmaTilings) {
    const double ctas = std::ceil(rows / t[0]) * static_cast<double>((nw + t[1] - 1) / t[1]);
    if (plan.wgmma_rows == 0 || ctas < fewest) {
      plan.wgmma_rows = t[0];
      fewest = ctas;
    }
  }
  return plan;
}

std::string MoeUnsupported(const MoeParams& p, const MoePlan& plan) {
  if (plan.wgmma_rows != 0 && plan.wgmma_rows != 128 && plan.wgmma_rows != 192) {
    return absl::StrCat("moe: the wgmma gate/up kernel has 128- and 192-row tiles, not ", plan.wgmma_rows);
  }
  if (plan.wgmma_rs != 0 && plan.wgmma_rs != 64 && plan.wgmma_rs != 128) {
    return absl::StrCat("moe: the wgmma_rs kernel has 64- and 128-weight-row CTAs, not ", plan.wgmma_rs);
  }
  if (plan.stream + (plan.wgmma_rs != 0) + (plan.wgmma_rows != 0) > 1) {
    return "moe: a plan runs one GEMM kernel: the weight stream, wgmma with the weights in registers, or the "
           "wgmma gate/up kernel";
  }
  if (!plan.stream && plan.mma_rows != 64 && plan.mma_rows != 128) {
    return absl::StrCat("moe: the mma.sync kernel has 64- and 128-row tiles, not ", plan.mma_rows);
  }
  // A layer's down half runs on mma.sync over the same routing tiles.
  if (plan.wgmma_rows != 0 && p.stage != MoeStage::kGateUp) {
    return "moe: the wgmma kernel serves the gate/up projection alone";
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
  if (plan.wgmma_rs != 0 && a_rows * (a_k / 8) >= (int64_t{1} << 32)) {
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
