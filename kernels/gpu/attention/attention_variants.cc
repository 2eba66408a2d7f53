#include "kernels/gpu/attention/attention_variants.h"

#include <cstdint>
#include <initializer_list>
#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/gpu/attention/attention.h"

namespace kernelserve {
namespace gpu {
namespace {

std::string HeadDims(const DeviceCaps& caps, const OpCall& c, std::initializer_list<int64_t> dims,
                     const char* names) {
  const std::string arch = NeedsSm90a(caps);
  if (!arch.empty()) return arch;
  for (int64_t d : dims) {
    if (c.attention.head_dim == d) return "";
  }
  return absl::StrCat("head_dim ", c.attention.head_dim, " (serves ", names, ")");
}

}  // namespace

// One entry serves every (valid) head dim on sm_90a.
const VariantTable& AttentionVariants() {
  static const VariantTable table = {
      {"wgmma_ws", "warp-specialized wgmma: TMA producer warpgroup, two consumer warpgroups in ping-pong",
       "sm_90a, head_dim 64, 128 and 256",
       [](const DeviceCaps& caps, const OpCall& c) { return HeadDims(caps, c, {64, 128, 256}, "64, 128, 256"); },
       nullptr,
       [](const OpCall& c, TensorView& out, cudaStream_t s) {
         return RunAttentionWgmmaWs(c.attention, c.q, c.k, c.v, out, s);
       }},
  };
  return table;
}

}  // namespace gpu
}  // namespace kernelserve
