#include "kernels/gpu/moe/moe_launch.h"

#include <cstdint>

#include "kernels/gpu/arch/sm90/moe/moe_gemm.h"
#include "kernels/gpu/moe/moe_params.h"
#include "kernels/gpu/moe/moe_routing.h"
#include "kernels/gpu/moe/moe_weighted_sum.h"

namespace kernelserve {
namespace gpu {
namespace moe {
namespace {

template <int kEpi>
cudaError_t LaunchMmaSync(int rows, const GemmParams& g, int64_t col_tiles, int64_t max_tiles, cudaStream_t s) {
  switch (rows) {
    case 16:
      return LaunchMmaSyncGemm<16, kEpi>(g, col_tiles, max_tiles, s);
    case 64:
      return LaunchMmaSyncGemm<64, kEpi>(g, col_tiles, max_tiles, s);
    default:
      return LaunchMmaSyncGemm<128, kEpi>(g, col_tiles, max_tiles, s);
  }
}

template <int kEpi>
cudaError_t LaunchWgmma(int rows, const GemmParams& g, int64_t max_tiles, cudaStream_t s) {
  return rows == 192 ? LaunchWgmmaGateUp<192, kEpi>(g, max_tiles, s) : LaunchWgmmaGateUp<128, kEpi>(g, max_tiles, s);
}

// Gate/up: x [T, K] x W13[e]^T into `out` (bf16 per pair, or SwiGLU's [pairs, I]).
cudaError_t GateUp(const MoeParams& p, const MoeInputs& in, const MoePlan& plan, GemmParams g, bool swiglu,
                   int rounding, void* out, int64_t max_tiles, cudaStream_t stream) {
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
  if (plan.wgmma_rows != 0) {
    return swiglu ? LaunchWgmma<kEpiSwiglu>(plan.wgmma_rows, g, max_tiles, stream)
                  : LaunchWgmma<kEpiBf16>(plan.wgmma_rows, g, max_tiles, stream);
  }
  return swiglu ? LaunchMmaSync<kEpiSwiglu>(plan.mma_rows, g, (p.inter + kMmaSyncCols / 2 - 1) / (kMmaSyncCols / 2),
                                            max_tiles, stream)
                : LaunchMmaSync<kEpiBf16>(plan.mma_rows, g, (2 * p.inter + kMmaSyncCols - 1) / kMmaSyncCols,
                                          max_tiles, stream);
}

// Down: a [pairs, I] x W2[e]^T into `out` (bf16 per pair, or fp32 for the weighted sum).
cudaError_t Down(const MoeParams& p, const MoeInputs& in, const MoePlan& plan, GemmParams g, const uint16_t* a,
                 bool f32, void* out, int64_t max_tiles, cudaStream_t stream) {
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
  const int64_t col_tiles = (p.out_dim + kMmaSyncCols - 1) / kMmaSyncCols;
  return f32 ? LaunchMmaSync<kEpiF32>(plan.mma_rows, g, col_tiles, max_tiles, stream)
             : LaunchMmaSync<kEpiBf16>(plan.mma_rows, g, col_tiles, max_tiles, stream);
}

cudaError_t Run(const MoeParams& p, const MoeInputs& in, const MoePlan& plan, const MoeWorkspace& w, uint8_t* ws,
                void* out, cudaStream_t stream) {
  const int64_t pairs = p.tokens * p.top_k;
  RoutingParams rp;
  rp.topk_ids = in.topk_ids.as<const int32_t>();
  rp.pairs = pairs;
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
  cudaError_t r = LaunchMoeRouting(rp, stream);
  if (r != cudaSuccess) return r;

  GemmParams g{};
  g.sorted = rp.sorted;
  g.tile_expert = rp.tile_expert;
  g.tile_rows = rp.tile_row_count;
  g.num_tiles = rp.num_tiles;
  uint16_t* h = reinterpret_cast<uint16_t*>(ws + w.h);
  float* y = reinterpret_cast<float*>(ws + w.y);
  switch (p.stage) {
    case MoeStage::kGateUp:
      return GateUp(p, in, plan, g, p.swiglu, static_cast<int>(p.rounding), out, w.max_tiles, stream);
    case MoeStage::kDown:
      if (!p.weighted_sum) return Down(p, in, plan, g, in.x.as<const uint16_t>(), false, out, w.max_tiles, stream);
      r = Down(p, in, plan, g, in.x.as<const uint16_t>(), true, y, w.max_tiles, stream);
      break;
    case MoeStage::kLayer:
      // The stored intermediate is RTNE bf16, as the oracle's.
      r = GateUp(p, in, plan, g, true, static_cast<int>(Rounding::kRtne), h, w.max_tiles, stream);
      if (r == cudaSuccess) r = Down(p, in, plan, g, h, true, y, w.max_tiles, stream);
      break;
  }
  if (r != cudaSuccess) return r;
  WeightedSumParams sp;
  sp.y = y;
  sp.weights = in.topk_weights.as<const float>();
  sp.tokens = p.tokens;
  sp.top_k = static_cast<int>(p.top_k);
  sp.n = p.out_dim;
  sp.out = static_cast<uint16_t*>(out);
  sp.rounding = static_cast<int>(p.rounding);
  return LaunchMoeWeightedSum(sp, stream);
}

}  // namespace

cudaError_t LaunchMoe(const MoeParams& p, const MoeInputs& in, const MoePlan& plan, void* out,
                      cudaStream_t stream) {
  const MoeWorkspace w = MoeWorkspaceLayout(p, plan);
  uint8_t* ws = nullptr;
  cudaError_t e = cudaMallocAsync(reinterpret_cast<void**>(&ws), w.bytes, stream);
  if (e != cudaSuccess) return e;
  e = Run(p, in, plan, w, ws, out, stream);
  const cudaError_t f = cudaFreeAsync(ws, stream);
  return e != cudaSuccess ? e : f;
}

}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve
