#include "kernels/gpu/moe/moe_gemm_args.h"

#include <algorithm>

namespace kernelserve {
namespace gpu {
namespace moe {

RoutingParams MakeRoutingParams(const MoeParams& p, const MoeInputs& in, const MoePlan& plan, const MoeWorkspace& w,
                                uint8_t* ws) {
  RoutingParams rp;
  rp.topk_ids = in.topk_ids.as<const int32_t>();
  rp.pairs = p.tokens * p.top_k;
  rp.experts = static_cast<int>(p.experts);
  rp.tile_rows = plan.TileRows();
  rp.max_tiles = w.max_tiles;
  rp.counts = reinterpret_cast<int*>(ws + w.counts);
  rp.cursor = reinterpret_cast<int*>(ws + w.cursor);
  rp.tile_start = reinterpret_cast<int*>(ws + w.tile_start);
  rp.tile_expert = reinterpret_cast<int*>(ws + w.tile_expert);
  rp.tile_row_count = reinterpret_cast<int*>(ws + w.tile_rows);
  rp.num_tiles = reinterpret_cast<int*>(ws + w.num_tiles);
  rp.sorted = reinterpret_cast<int*>(ws + w.sorted);
  return rp;
}

int RoutingBlocks(int64_t pairs) { return static_cast<int>(std::min<int64_t>((pairs + 255) / 256, 1024)); }

namespace {

GemmParams OverRouting(const RoutingParams& r) {
  GemmParams g{};
  g.sorted = r.sorted;
  g.tile_expert = r.tile_expert;
  g.tile_rows = r.tile_row_count;
  g.num_tiles = r.num_tiles;
  return g;
}

}  // namespace

GemmParams GateUpGemm(const MoeParams& p, const MoeInputs& in, const RoutingParams& r, bool swiglu, int rounding,
                      void* out) {
  GemmParams g = OverRouting(r);
  g.a = in.x.as<const uint16_t>();
  g.a_row_div = static_cast<int>(p.top_k);
  g.w = in.w13.as<const uint8_t>();
  g.ws = in.w13_scales.as<const uint8_t>();
  g.nw = 2 * p.inter;
  g.k = p.hidden;
  g.inter = static_cast<int>(p.inter);
  g.out = out;
  g.out_cols = swiglu ? p.inter : 2 * p.inter;
  g.rounding = rounding;
  return g;
}

GemmParams DownGemm(const MoeParams& p, const MoeInputs& in, const RoutingParams& r, const uint16_t* a, void* out) {
  GemmParams g = OverRouting(r);
  g.a = a;
  g.a_row_div = 1;
  g.w = in.w2.as<const uint8_t>();
  g.ws = in.w2_scales.as<const uint8_t>();
  g.nw = p.out_dim;
  g.k = p.inter;
  g.inter = static_cast<int>(p.inter);
  g.out = out;
  g.out_cols = p.out_dim;
  g.rounding = static_cast<int>(p.rounding);
  return g;
}

WeightedSumParams MakeWeightedSum(const MoeParams& p, const MoeInputs& in, const float* y, void* out) {
  WeightedSumParams sp;
  sp.y = y;
  sp.weights = in.topk_weights.as<const float>();
  sp.tokens = p.tokens;
  sp.top_k = static_cast<int>(p.top_k);
  sp.n = p.out_dim;
  sp.out = static_cast<uint16_t*>(out);
  sp.rounding = static_cast<int>(p.rounding);
  return sp;
}

}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve
