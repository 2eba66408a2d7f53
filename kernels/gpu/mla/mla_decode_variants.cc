#include "kernels/gpu/mla/mla_decode_variants.h"

#include "absl/strings/str_cat.h"
#include "kernels/gpu/mla/mla_decode.h"

namespace kernelserve {
namespace gpu {

const VariantTable& MlaDecodeVariants() {
  static const VariantTable table = {
      {"wgmma_rega", "fp8 KV converted in registers into the wgmma A operand (f16 tensor cores), producer warpgroup",
       "sm_90a, e4m3fn KV",
       [](const DeviceCaps& caps, const OpCall& c) {
         std::string no = NeedsSm90a(caps);
         if (no.empty() && c.mla.kv_dtype != DType::kFp8E4M3Fn) {
           no = absl::StrCat("KV ", DTypeName(c.mla.kv_dtype), " (serves fp8_e4m3fn)");
         }
         return no;
       },
       nullptr,
       [](const OpCall& c, TensorView& out, cudaStream_t s) {
         return RunMlaDecodeWith(MlaKernel::kWgmmaRegA, c.mla, c.mla_in, out, s);
       }},
      {"wgmma_roles", "bf16 wgmma, warpgroups in roles (QK^T + softmax + half of PV; unpack + the other half)",
       "sm_90a, e4m3fn and e4m3fnuz KV", [](const DeviceCaps& caps, const OpCall&) { return NeedsSm90a(caps); },
       nullptr,
       [](const OpCall& c, TensorView& out, cudaStream_t s) {
         return RunMlaDecodeWith(MlaKernel::kWgmmaRoles, c.mla, c.mla_in, out, s);
       }},
  };
  return table;
}

}  // namespace gpu
}  // namespace kernelserve
