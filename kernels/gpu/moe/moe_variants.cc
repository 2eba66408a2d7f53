#include "kernels/gpu/moe/moe_variants.h"

#include <string>

#include "kernels/gpu/moe/moe.h"

namespace kernelserve {
namespace gpu {
namespace {

// The GEMM an entry runs.
enum class Gemm { kStream, kWgmmaRs128, kWgmmaRs64, kWgmma128, kWgmma192, kMmaSync };

// An entry's plan: PlanMoe's, on the entry's GEMM (mma.sync keeps PlanMoe's
// row tile, 64 where PlanMoe streams).
template <Gemm kGemm>
moe::MoePlan EntryPlan(const OpCall& c) {
  moe::MoePlan plan = moe::PlanMoe(c.moe);
  plan.stream = kGemm == Gemm::kStream;
  plan.wgmma_rs = kGemm == Gemm::kWgmmaRs128 ? 128 : kGemm == Gemm::kWgmmaRs64 ? 64 : 0;
  plan.wgmma_rows = kGemm == Gemm::kWgmma128 ? 128 : kGemm == Gemm::kWgmma192 ? 192 : 0;
  return plan;
}

template <Gemm kGemm>
std::string Unsupported(const DeviceCaps& caps, const OpCall& c) {
  std::string no = NeedsSm90a(caps);
  if (no.empty()) no = moe::MoeUnsupported(c.moe, EntryPlan<kGemm>(c));
  return no;
}

// The dispatcher's choice between the GEMMs is PlanMoe's.
template <Gemm kGemm>
std::string UnlessPlanned(const DeviceCaps&, const OpCall& c) {
  const moe::MoePlan plan = moe::PlanMoe(c.moe);
  if (kGemm == Gemm::kStream) {
    return plan.stream ? "" : "the dispatcher takes it below 12 rows per expert (decode)";
  }
  if (kGemm == Gemm::kWgmmaRs128 || kGemm == Gemm::kWgmmaRs64) {
    return plan.wgmma_rs == EntryPlan<kGemm>(c).wgmma_rs ? "" : "the dispatcher does not take it (yet): it runs by name";
  }
  if (plan.wgmma_rows == EntryPlan<kGemm>(c).wgmma_rows) return "";
  return "the dispatcher takes it for gate/up alone at >= 72 rows per expert when its tiling launches the fewest "
         "CTAs";
}

template <Gemm kGemm>
absl::Status Run(const OpCall& c, TensorView& out, cudaStream_t s) {
  return RunMoeWithPlan(EntryPlan<kGemm>(c), c.moe, c.moe_in, out, s);
}

}  // namespace

const VariantTable& MoeVariants() {
  static const VariantTable table = {
      {"stream", "weight-streaming mma.sync GEMM, weights dequantized in registers, 16-row expert tiles",
       "sm_90a, every stage", Unsupported<Gemm::kStream>, UnlessPlanned<Gemm::kStream>, Run<Gemm::kStream>},
      {"wgmma_rs_128", "wgmma with the dequantized weights as the register operand, the expert's rows as N (a "
       "multiple of 32), warp-specialized; 128 weight rows per CTA, one CTA per SM", "sm_90a, every stage",
       Unsupported<Gemm::kWgmmaRs128>, UnlessPlanned<Gemm::kWgmmaRs128>, Run<Gemm::kWgmmaRs128>},
      {"wgmma_rs_64", "the same with 64 weight rows per CTA, two CTAs per SM", "sm_90a, every stage",
       Unsupported<Gemm::kWgmmaRs64>, UnlessPlanned<Gemm::kWgmmaRs64>, Run<Gemm::kWgmmaRs64>},
      {"wgmma_sw_128x256", "wgmma, 128-row x 256-weight-row tiles, 128-byte-swizzled operands",
       "sm_90a, gate/up (+SwiGLU) alone", Unsupported<Gemm::kWgmma128>, UnlessPlanned<Gemm::kWgmma128>,
       Run<Gemm::kWgmma128>},
      {"wgmma_sw_192x192", "wgmma, 192 x 192 tiles (3 warpgroups), 128-byte-swizzled operands",
       "sm_90a, gate/up (+SwiGLU) alone", Unsupported<Gemm::kWgmma192>, UnlessPlanned<Gemm::kWgmma192>,
       Run<Gemm::kWgmma192>},
      {"mma_sync", "mma.sync grouped GEMM, 64/128-row expert tiles by rows per expert", "sm_90a, every stage",
       Unsupported<Gemm::kMmaSync>, nullptr, Run<Gemm::kMmaSync>},
  };
  return table;
}

}  // namespace gpu
}  // namespace kernelserve
