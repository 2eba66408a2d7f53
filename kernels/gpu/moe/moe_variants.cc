#include "kernels/gpu/moe/moe_variants.h"

#include <string>

#include "kernels/gpu/moe/moe.h"

namespace kernelserve {
namespace gpu {
namespace {

// The GEMM an entry runs. The kWgmmaRs* entries after kWgmmaRs are the
// walk-length A/B of issue 16 (a B-streamed CTA walks 1 or 3 column tiles,
// a B-resident one 7) and leave once the device has measured them.
enum class Gemm { kStream, kWgmmaRs, kMmaSync, kWgmmaRsWalk1, kWgmmaRsWalk3, kWgmmaRsResident7 };

// An entry's plan: its GEMM for every projection of the call.
template <Gemm kGemm>
moe::MoePlan EntryPlan() {
  moe::MoePlan plan;
  plan.stream = kGemm == Gemm::kStream;
  plan.wgmma_rs = kGemm != Gemm::kStream && kGemm != Gemm::kMmaSync;
  plan.rs_b_resident = plan.wgmma_rs;
  plan.rs_stream_cols = kGemm == Gemm::kWgmmaRsWalk1 ? 1 : kGemm == Gemm::kWgmmaRsWalk3 ? 3 : moe::kRsStreamCols;
  if (kGemm == Gemm::kWgmmaRsResident7) plan.rs_resident_cols = 7;
  return plan;
}

template <Gemm kGemm>
std::string Unsupported(const DeviceCaps& caps, const OpCall& c) {
  std::string no = NeedsSm90a(caps);
  if (no.empty()) no = moe::MoeUnsupported(c.moe, EntryPlan<kGemm>());
  return no;
}

// The dispatcher's choice between the GEMMs is PlanMoe's.
template <Gemm kGemm>
std::string UnlessPlanned(const DeviceCaps&, const OpCall& c) {
  const moe::MoePlan plan = moe::PlanMoe(c.moe);
  if (kGemm == Gemm::kStream) {
    return plan.stream ? "" : "the dispatcher takes it below 12 rows per expert (decode)";
  }
  if (kGemm != Gemm::kWgmmaRs) return "an A/B entry of the walk's length";
  return plan.wgmma_rs ? "" : "the dispatcher takes it from 12 rows per expert (down: from 64)";
}

template <Gemm kGemm>
absl::Status Run(const OpCall& c, TensorView& out, cudaStream_t s) {
  return RunMoeWithPlan(EntryPlan<kGemm>(), c.moe, c.moe_in, out, s);
}

}  // namespace

const VariantTable& MoeVariants() {
  static const VariantTable table = {
      {"stream", "weight-streaming mma.sync GEMM, weights dequantized in registers, 16-row expert tiles",
       "sm_90a, every stage", Unsupported<Gemm::kStream>, UnlessPlanned<Gemm::kStream>, Run<Gemm::kStream>},
      {"wgmma_rs", "warp-specialized wgmma with the dequantized weights as the register operand and an expert's "
       "rows as N (a multiple of 32, up to 192-row tiles), 128 weight rows per column tile, a CTA walking 2 "
       "column tiles; with K <= 384 it keeps its tile's rows resident over 4", "sm_90a, every stage",
       Unsupported<Gemm::kWgmmaRs>, UnlessPlanned<Gemm::kWgmmaRs>, Run<Gemm::kWgmmaRs>},
      {"wgmma_rs_walk1", "wgmma_rs with B-streamed CTAs on one column tile each (A/B)", "sm_90a, every stage",
       Unsupported<Gemm::kWgmmaRsWalk1>, UnlessPlanned<Gemm::kWgmmaRsWalk1>, Run<Gemm::kWgmmaRsWalk1>},
      {"wgmma_rs_walk3", "wgmma_rs with B-streamed CTAs walking 3 column tiles (A/B)", "sm_90a, every stage",
       Unsupported<Gemm::kWgmmaRsWalk3>, UnlessPlanned<Gemm::kWgmmaRsWalk3>, Run<Gemm::kWgmmaRsWalk3>},
      {"wgmma_rs_res7", "wgmma_rs with B-resident CTAs walking 7 column tiles (A/B)", "sm_90a, every stage",
       Unsupported<Gemm::kWgmmaRsResident7>, UnlessPlanned<Gemm::kWgmmaRsResident7>,
       Run<Gemm::kWgmmaRsResident7>},
      {"mma_sync", "mma.sync grouped GEMM, 64-row expert tiles (down below 64 rows per expert)", "sm_90a, every stage",
       Unsupported<Gemm::kMmaSync>, nullptr, Run<Gemm::kMmaSync>},
  };
  return table;
}

}  // namespace gpu
}  // namespace kernelserve
