#include "kernels/gpu/attention/attention_variants.h"

#include "absl/strings/str_cat.h"
#include "kernels/gpu/attention/attention_cuda.h"

namespace kernelserve {
namespace gpu {
namespace {

std::string HeadDims(const OpCall& c, std::initializer_list<int64_t> dims, const char* names) {
  for (int64_t d : dims) {
    if (c.attention.head_dim == d) return "";
  }
  return absl::StrCat("head_dim ", c.attention.head_dim, " (serves ", names, ")");
}

}  // namespace

const VariantTable& AttentionVariants() {
  static const VariantTable table = {
      {"wgmma_ws", "warp-specialized wgmma: TMA producer warpgroup, two consumer warpgroups in ping-pong",
       "sm_90a, head_dim 128",
       [](const DeviceCaps& caps, const OpCall& c) {
         const std::string arch = NeedsSm90a(caps);
         return arch.empty() ? HeadDims(c, {128}, "128") : arch;
       },
       nullptr,
       [](const OpCall& c, TensorView& out, cudaStream_t s) {
         return RunAttention(c.attention, c.q, c.k, c.v, out, s, AttentionKernel::kWgmmaWs);
       }},
      {"mma_sync", "mma.sync m16n8k16 with cp.async double buffering", "sm_90a, head_dim 64, 128, 256",
       [](const DeviceCaps& caps, const OpCall& c) {
         const std::string arch = NeedsSm90a(caps);
         return arch.empty() ? HeadDims(c, {64, 128, 256}, "64, 128, 256") : arch;
       },
       nullptr,
       [](const OpCall& c, TensorView& out, cudaStream_t s) {
         return RunAttention(c.attention, c.q, c.k, c.v, out, s, AttentionKernel::kMmaSync);
       }},
  };
  return table;
}

}  // namespace gpu
}  // namespace kernelserve
