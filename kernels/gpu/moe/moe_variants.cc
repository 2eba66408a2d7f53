#include "kernels/gpu/moe/moe_variants.h"

#include <string>

#include "kernels/gpu/moe/moe.h"
#include "kernels/gpu/moe/moe_plan.h"

namespace kernelserve {
namespace gpu {
namespace {

// The GEMM an entry runs.
enum class Gemm { kStream, kWgmmaRs, kMmaSync };

// An entry's plan: its GEMM for every projection of the call, walking as
// the dispatcher's plan walks.
template <Gemm kGemm>
moe::MoePlan EntryPlan(const MoeParams& p) {
  moe::MoePlan plan;
  plan.stream = kGemm == Gemm::kStream;
  plan.wgmma_rs = kGemm == Gemm::kWgmmaRs;
  plan.rs_b_resident = plan.wgmma_rs;
  if (plan.wgmma_rs) plan.rs_stream_cols = moe::RsStreamCols(p);
  return plan;
}

template <Gemm kGemm>
std::string Unsupported(const DeviceCaps& caps, const OpCall& c) {
  std::string no = NeedsSm90a(caps);
  if (no.empty()) no = moe::MoeUnsupported(c.moe, EntryPlan<kGemm>(c.moe));
  return no;
}

// The dispatcher's choice between the GEMMs is PlanMoe's.
template <Gemm kGemm>
std::string UnlessPlanned(const DeviceCaps&, const OpCall& c) {
  const moe::MoePlan plan = moe::PlanMoe(c.moe);
  if (kGemm == Gemm::kStream) {
    return plan.stream ? "" : "the dispatcher takes it below 12 rows per expert (decode)";
  }
  return plan.wgmma_rs ? "" : "the dispatcher takes it from 12 rows per expert (down: from 64)";
}

template <Gemm kGemm>
absl::Status Run(const OpCall& c, TensorView& out, cudaStream_t s) {
  return RunMoeWithPlan(EntryPlan<kGemm>(c.moe), c.moe, c.moe_in, out, s);
}

}  // namespace

const VariantTable& MoeVariants() {
  static const VariantTable table = {
      {"stream", "weight-streaming mma.sync GEMM, weights dequantized in registers, 16-row expert tiles",
       "sm_90a, every stage", Unsupported<Gemm::kStream>, UnlessPlanned<Gemm::kStream>, Run<Gemm::kStream>},
      {"wgmma_rs", "warp-specialized wgmma with the dequantized weights as the register operand and an expert's "
       "rows as N (a multiple of 32, up to 192-row tiles), 128 weight rows per column tile; a CTA walks 2 column "
       "tiles below 192 rows per expert, or with K <= 384 keeps its tile's rows resident over 7",
       "sm_90a, every stage", Unsupported<Gemm::kWgmmaRs>, UnlessPlanned<Gemm::kWgmmaRs>, Run<Gemm::kWgmmaRs>},
      {"mma_sync", "mma.sync grouped GEMM, 64-row expert tiles (down below 64 rows per expert)", "sm_90a, every stage",
       Unsupported<Gemm::kMmaSync>, nullptr, Run<Gemm::kMmaSync>},
  };
  return table;
}

}  // namespace gpu
}  // namespace kernelserve
