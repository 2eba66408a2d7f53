#include "kernels/gpu/fp8_attention/fp8_attention_variants.h"

#include "absl/strings/str_cat.h"
#include "kernels/gpu/fp8_attention/fp8_attention.h"

namespace kernelserve {
namespace gpu {
namespace {

std::string Common(const DeviceCaps& caps, const OpCall& c) {
  std::string arch = NeedsSm90a(caps);
  if (!arch.empty()) return arch;
  if (c.fp8.format != Fp8Format::kE4M3Fn) {
    return absl::StrCat("serves e4m3fn, not ", Fp8FormatName(c.fp8.format));
  }
  return "";
}

}  // namespace

const VariantTable& Fp8AttentionVariants() {
  static const VariantTable table = {
      {"qgmma", "wgmma e4m3 (QGMMA): each 64-key block in its own accumulator, folded into O in fp32",
       "sm_90a, e4m3fn, (d_qk, d_v) = (128, 128)",
       [](const DeviceCaps& caps, const OpCall& c) {
         std::string no = Common(caps, c);
         if (no.empty() && !(c.fp8.d_qk == 128 && c.fp8.d_v == 128)) {
           no = absl::StrCat("(d_qk, d_v) = (", c.fp8.d_qk, ", ", c.fp8.d_v, ") (serves (128, 128))");
         }
         return no;
       },
       nullptr,
       [](const OpCall& c, TensorView& out, cudaStream_t s) {
         return RunFp8Attention(c.fp8, c.fp8_in, out, s, Fp8AttentionKernel::kQgmma);
       }},
      {"mma_sync", "mma.sync m16n8k32 e4m3", "sm_90a, e4m3fn, (d_qk, d_v) = (128, 128) and (192, 128)", Common,
       nullptr,
       [](const OpCall& c, TensorView& out, cudaStream_t s) {
         return RunFp8Attention(c.fp8, c.fp8_in, out, s, Fp8AttentionKernel::kMmaSync);
       }},
  };
  return table;
}

}  // namespace gpu
}  // namespace kernelserve
