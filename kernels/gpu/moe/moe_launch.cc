#include "kernels/gpu/moe/moe_launch.h"

#include <cstdint>

#include "kernels/gpu/arch/sm90/moe/moe_gemm.h"
#include "kernels/gpu/moe/moe_gemm_args.h"
#include "kernels/gpu/moe/moe_params.h"
#include "kernels/gpu/moe/moe_routing.h"
#include "kernels/gpu/moe/moe_weighted_sum.h"

namespace kernelserve {
namespace gpu {
namespace moe {
namespace {

// The column tiles a wgmma_rs CTA walks, and whether the routing tile's B
// stays resident for the walk (where K allows and the plan asks for it).
void SetRsWalk(const MoePlan& plan, GemmParams* g) {
  g->b_resident = plan.rs_b_resident && g->k <= kRsResidentMaxK;
  g->cols_per_cta = g->b_resident ? plan.rs_resident_cols : plan.rs_stream_cols;
}

cudaError_t GateUp(const MoeParams& p, const MoeInputs& in, const MoePlan& plan, const RoutingParams& rp,
                   bool swiglu, int rounding, void* out, cudaStream_t stream) {
  GemmParams g = GateUpGemm(p, in, rp, swiglu, rounding, out);
  if (plan.stream) {
    return swiglu ? LaunchStreamGemm<kEpiSwiglu>(g, rp.max_tiles, stream)
                  : LaunchStreamGemm<kEpiBf16>(g, rp.max_tiles, stream);
  }
  if (plan.wgmma_rs) {
    SetRsWalk(plan, &g);
    return swiglu ? LaunchWgmmaRsGemm<kEpiSwiglu>(g, rp.max_tiles, stream)
                  : LaunchWgmmaRsGemm<kEpiBf16>(g, rp.max_tiles, stream);
  }
  return swiglu ? LaunchMmaSyncGemm<64, kEpiSwiglu>(g, (p.inter + kMmaSyncCols / 2 - 1) / (kMmaSyncCols / 2),
                                                    rp.max_tiles, stream)
                : LaunchMmaSyncGemm<64, kEpiBf16>(g, (2 * p.inter + kMmaSyncCols - 1) / kMmaSyncCols, rp.max_tiles,
                                                  stream);
}

cudaError_t Down(const MoeParams& p, const MoeInputs& in, const MoePlan& plan, const RoutingParams& rp,
                 const uint16_t* a, bool f32, void* out, cudaStream_t stream) {
  GemmParams g = DownGemm(p, in, rp, a, out);
  if (plan.stream) {
    return f32 ? LaunchStreamGemm<kEpiF32>(g, rp.max_tiles, stream) : LaunchStreamGemm<kEpiBf16>(g, rp.max_tiles, stream);
  }
  if (plan.wgmma_rs) {
    SetRsWalk(plan, &g);
    return f32 ? LaunchWgmmaRsGemm<kEpiF32>(g, rp.max_tiles, stream)
               : LaunchWgmmaRsGemm<kEpiBf16>(g, rp.max_tiles, stream);
  }
  const int64_t col_tiles = (p.out_dim + kMmaSyncCols - 1) / kMmaSyncCols;
  return f32 ? LaunchMmaSyncGemm<64, kEpiF32>(g, col_tiles, rp.max_tiles, stream)
             : LaunchMmaSyncGemm<64, kEpiBf16>(g, col_tiles, rp.max_tiles, stream);
}

cudaError_t Run(const MoeParams& p, const MoeInputs& in, const MoePlan& plan, const MoeWorkspace& w, uint8_t* ws,
                void* out, cudaStream_t stream) {
  const RoutingParams rp = MakeRoutingParams(p, in, plan, w, ws);
  cudaError_t r = LaunchMoeRouting(rp, stream);
  if (r != cudaSuccess) return r;
  uint16_t* h = reinterpret_cast<uint16_t*>(ws + w.h);
  float* y = reinterpret_cast<float*>(ws + w.y);
  switch (p.stage) {
    case MoeStage::kGateUp:
      return GateUp(p, in, plan, rp, p.swiglu, static_cast<int>(p.rounding), out, stream);
    case MoeStage::kDown:
      if (!p.weighted_sum) return Down(p, in, plan, rp, in.x.as<const uint16_t>(), false, out, stream);
      r = Down(p, in, plan, rp, in.x.as<const uint16_t>(), true, y, stream);
      break;
    case MoeStage::kLayer:
      // The stored intermediate is RTNE bf16, as the oracle's.
      r = GateUp(p, in, plan, rp, true, static_cast<int>(Rounding::kRtne), h, stream);
      if (r == cudaSuccess) r = Down(p, in, plan, rp, h, true, y, stream);
      break;
  }
  if (r != cudaSuccess) return r;
  return LaunchMoeWeightedSum(MakeWeightedSum(p, in, y, out), stream);
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
