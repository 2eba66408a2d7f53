#include "kernels/gpu/mla/mla_decode_variants.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/gpu/arch/sm90/mla/mla_sm90_kernels.h"
#include "kernels/gpu/mla/mla_decode.h"
#include "kernels/gpu/mla/mla_split_plan.h"

namespace kernelserve {
namespace gpu {
namespace {

// Empty on sm_90a with KV in `dtype`, else why not. Each kernel serves every
// shape of the op for its KV format.
std::string NeedsSm90aAndKv(const DeviceCaps& caps, const OpCall& c, DType dtype) {
  std::string no = NeedsSm90a(caps);
  if (no.empty() && c.mla.kv_dtype != dtype) {
    no = absl::StrCat("KV ", DTypeName(c.mla.kv_dtype), " (serves ", DTypeName(dtype), ")");
  }
  return no;
}

}  // namespace

const VariantTable& MlaDecodeVariants() {
  static const VariantTable table = {
      {"wgmma_rega", "fp8 KV converted in registers into the wgmma A operand (f16 tensor cores), producer warpgroup",
       "sm_90a, e4m3fn KV",
       [](const DeviceCaps& caps, const OpCall& c) { return NeedsSm90aAndKv(caps, c, DType::kFp8E4M3Fn); },
       nullptr,
       [](const OpCall& c, TensorView& out, cudaStream_t s) {
         return RunMlaDecode(mla::WgmmaRegAKernel(mla::RegACtaRows(c.mla.q_len, c.mla.heads)), c.mla, c.mla_in,
                             out, s);
       }},
      {"wgmma_roles", "bf16 wgmma, warpgroups in roles (QK^T + softmax + half of PV; unpack + the other half)",
       "sm_90a, e4m3fnuz KV",
       [](const DeviceCaps& caps, const OpCall& c) { return NeedsSm90aAndKv(caps, c, DType::kFp8E4M3Fnuz); },
       nullptr,
       [](const OpCall& c, TensorView& out, cudaStream_t s) {
         return RunMlaDecode(mla::WgmmaRolesKernel(), c.mla, c.mla_in, out, s);
       }},
  };
  return table;
}

OpCall MlaDecodeCall(const MlaDecodeParams& p, const MlaDecodeInputs& in) { return MakeOpCall(p, in); }

}  // namespace gpu
}  // namespace kernelserve
