#include "kernels/gpu/arch/gfx942/attention/attention_gfx942_launch.h"

#include "absl/strings/str_cat.h"

namespace kernelserve {
namespace gpu {
namespace attention {
namespace gfx942 {

std::string Unsupported(const AttentionParams& p) {
  if (p.head_dim != kHeadDim) {
    return absl::StrCat("attention: the hip backend serves head_dim ", kHeadDim, " (got ", p.head_dim, ")");
  }
  return "";
}

Grid GridOf(const FlashFwdParams& fp) {
  Grid g;
  g.x = static_cast<unsigned>((fp.seq_q + kRows - 1) / kRows);
  g.y = static_cast<unsigned>(fp.heads_q);
  g.z = static_cast<unsigned>(fp.batch);
  return g;
}

}  // namespace gfx942
}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve
