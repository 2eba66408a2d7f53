#include "kernels/gpu/moe/moe_variants.h"

#include <string>

#include "kernels/gpu/moe/moe.h"

namespace kernelserve {
namespace gpu {
namespace {

// An entry's plan: PlanMoe's, on the entry's GEMM (kWgmmaRows: the wgmma
// tile's rows; 0: mma.sync with PlanMoe's row tile).
template <int kWgmmaRows>
moe::MoePlan EntryPlan(const OpCall& c) {
  moe::MoePlan plan = moe::PlanMoe(c.moe);
  plan.wgmma_rows = kWgmmaRows;
  return plan;
}

template <int kWgmmaRows>
std::string Unsupported(const DeviceCaps& caps, const OpCall& c) {
  std::string no = NeedsSm90a(caps);
  if (no.empty()) no = moe::MoeUnsupported(c.moe, EntryPlan<kWgmmaRows>(c));
  return no;
}

// The dispatcher's choice between the GEMMs is PlanMoe's.
template <int kWgmmaRows>
std::string UnlessPlanned(const DeviceCaps&, const OpCall& c) {
  if (moe::PlanMoe(c.moe).wgmma_rows == kWgmmaRows) return "";
  return "the dispatcher takes it for gate/up alone at >= 72 rows per expert when its tiling launches the fewest "
         "CTAs";
}

template <int kWgmmaRows>
absl::Status Run(const OpCall& c, TensorView& out, cudaStream_t s) {
  return RunMoeWithPlan(EntryPlan<kWgmmaRows>(c), c.moe, c.moe_in, out, s);
}

}  // namespace

const VariantTable& MoeVariants() {
  static const VariantTable table = {
      {"wgmma_sw_128x256", "wgmma, 128-row x 256-weight-row tiles, 128-byte-swizzled operands",
       "sm_90a, gate/up (+SwiGLU) alone", Unsupported<128>, UnlessPlanned<128>, Run<128>},
      {"wgmma_sw_192x192", "wgmma, 192 x 192 tiles (3 warpgroups), 128-byte-swizzled operands",
       "sm_90a, gate/up (+SwiGLU) alone", Unsupported<192>, UnlessPlanned<192>, Run<192>},
      {"mma_sync", "mma.sync grouped GEMM, 16/64/128-row expert tiles by rows per expert", "sm_90a, every stage",
       Unsupported<0>, nullptr, Run<0>},
  };
  return table;
}

}  // namespace gpu
}  // namespace kernelserve
