#include "kernels/gpu/moe/moe_variants.h"

#include "absl/strings/str_cat.h"
#include "kernels/gpu/moe/moe.h"

namespace kernelserve {
namespace gpu {
namespace {

std::string GateUpAlone(const DeviceCaps& caps, const OpCall& c) {
  std::string no = NeedsSm90a(caps);
  if (no.empty() && c.moe.stage != MoeStage::kGateUp) no = "serves the gate/up projection alone";
  return no;
}

// The dispatcher's choice between the GEMMs (AutoMoeGemm: by rows per expert
// and the CTA count of each tiling).
std::string UnlessAutoIs(MoeGemm gemm, const OpCall& c) {
  if (AutoMoeGemm(c.moe) == gemm) return "";
  return "the dispatcher takes it for gate/up alone at >= 72 rows per expert, in whichever tiling launches "
         "fewer CTAs";
}

}  // namespace

const VariantTable& MoeVariants() {
  static const VariantTable table = {
      {"wgmma_sw_128x256", "wgmma, 128-row x 256-weight-row tiles, 128-byte-swizzled operands",
       "sm_90a, gate/up (+SwiGLU) alone", GateUpAlone,
       [](const DeviceCaps&, const OpCall& c) { return UnlessAutoIs(MoeGemm::kWgmmaSw, c); },
       [](const OpCall& c, TensorView& out, cudaStream_t s) {
         return RunMoeWithGemm(MoeGemm::kWgmmaSw, 0, c.moe, c.moe_in, out, s);
       }},
      {"wgmma_sw_192x192", "wgmma, 192 x 192 tiles (3 warpgroups), 128-byte-swizzled operands",
       "sm_90a, gate/up (+SwiGLU) alone", GateUpAlone,
       [](const DeviceCaps&, const OpCall& c) { return UnlessAutoIs(MoeGemm::kWgmmaWideSw, c); },
       [](const OpCall& c, TensorView& out, cudaStream_t s) {
         return RunMoeWithGemm(MoeGemm::kWgmmaWideSw, 0, c.moe, c.moe_in, out, s);
       }},
      {"mma_sync", "mma.sync grouped GEMM, 16/64/128-row expert tiles by rows per expert", "sm_90a, every stage",
       [](const DeviceCaps& caps, const OpCall&) { return NeedsSm90a(caps); }, nullptr,
       [](const OpCall& c, TensorView& out, cudaStream_t s) {
         return RunMoeWithGemm(MoeGemm::kMmaSync, 0, c.moe, c.moe_in, out, s);
       }},
  };
  return table;
}

}  // namespace gpu
}  // namespace kernelserve
