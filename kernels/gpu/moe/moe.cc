#include "kernels/gpu/moe/moe.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/gpu/common/gpu_status.h"
#include "kernels/gpu/moe/moe_launch.h"

namespace kernelserve {
namespace gpu {

absl::Status RunMoe(const MoeParams& p, const MoeInputs& in, TensorView& out, cudaStream_t stream) {
  return RunMoeWithPlan(moe::PlanMoe(p), p, in, out, stream);
}

absl::Status RunMoeWithPlan(const moe::MoePlan& plan, const MoeParams& p, const MoeInputs& in, TensorView& out,
                            cudaStream_t stream) {
  const TensorDesc want = p.OutputDesc();
  if (out.desc.dtype != want.dtype || out.desc.shape != want.shape) {
    return absl::InvalidArgumentError(
        absl::StrCat("moe: out must be ", want.DebugString(), ", got ", out.desc.DebugString()));
  }
  if (const std::string why = moe::MoeUnsupported(p, plan); !why.empty()) return absl::UnimplementedError(why);
  if (p.tokens == 0) return absl::OkStatus();
  return GpuStatus(moe::LaunchMoe(p, in, plan, out.data, stream), "moe launch");
}

}  // namespace gpu
}  // namespace kernelserve
