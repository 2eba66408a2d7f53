#include "kernels/gpu/fp8_attention/fp8_attention_variants.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/gpu/arch/sm90/fp8_attention/fp8_kernels.h"
#include "kernels/gpu/fp8_attention/fp8_attention.h"

namespace kernelserve {
namespace gpu {
namespace {

std::string WsServes(const DeviceCaps& caps, const OpCall& c) {
  std::string arch = NeedsSm90a(caps);
  if (!arch.empty()) return arch;
  if (c.fp8.format != Fp8Format::kE4M3Fn && c.fp8.format != Fp8Format::kE4M3Fnuz) {
    return absl::StrCat("serves e4m3fn and e4m3fnuz, not ", Fp8FormatName(c.fp8.format));
  }
  if ((c.fp8.d_qk != 128 && c.fp8.d_qk != 192) || c.fp8.d_v != 128) {
    return absl::StrCat("(d_qk, d_v) = (", c.fp8.d_qk, ", ", c.fp8.d_v, ") (serves (128 | 192, 128))");
  }
  return "";
}

// Two stages of K, raw V and V^T: three measured 2-4 % slower with lean P
// on the H200 (bench/NOTES.md).
template <int kStages>
absl::Status RunWs(const OpCall& c, TensorView& out, cudaStream_t s) {
  fp8_attention::KernelLaunch launch = nullptr;
  if (c.fp8.d_qk == 128 && c.fp8.d_v == 128) {
    launch = c.fp8.causal ? &fp8_attention::LaunchFp8Ws<128, true, kStages>
                          : &fp8_attention::LaunchFp8Ws<128, false, kStages>;
  } else if (c.fp8.d_qk == 192 && c.fp8.d_v == 128) {
    launch = c.fp8.causal ? &fp8_attention::LaunchFp8Ws<192, true, kStages>
                          : &fp8_attention::LaunchFp8Ws<192, false, kStages>;
  }
  return RunFp8Attention(c.fp8, c.fp8_in, out, s, "ws", launch);
}

}  // namespace

// Every (valid) e4m3fn call on sm_90a has one entry that serves it.
const VariantTable& Fp8AttentionVariants() {
  static const VariantTable table = {
      {"ws",
       "wgmma e4m3 (QGMMA), warp-specialized: a TMA producer warpgroup transposing V, two consumer warpgroups in "
       "ping-pong; each 64-key block's P V folded into O in fp32",
       "sm_90a, e4m3fn, (d_qk, d_v) = (128 | 192, 128)",
       WsServes, nullptr, RunWs<2>},
  };
  return table;
}

}  // namespace gpu
}  // namespace kernelserve
