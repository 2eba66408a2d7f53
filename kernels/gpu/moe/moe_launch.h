// The launcher of one MXFP4 MoE call: host arguments -> device params, the
// workspace, and the kernels of the stage in stream order (routing, the
// GEMMs, the weighted sum). moe.cc checks the call before it gets here.
#ifndef KERNELSERVE_KERNELS_GPU_MOE_MOE_LAUNCH_H_
#define KERNELSERVE_KERNELS_GPU_MOE_MOE_LAUNCH_H_

#include "kernels/api/ops.h"
#include "kernels/gpu/common/gpu.h"
#include "kernels/gpu/moe/moe_plan.h"

namespace kernelserve {
namespace gpu {
namespace moe {

// `p` validated with p.tokens > 0, MoeUnsupported(p, plan) empty; the views
// and `out` (MoeParams::OutputDesc) are device memory. The workspace is
// allocated and freed on `stream` (graph capturable: no host synchronization).
cudaError_t LaunchMoe(const MoeParams& p, const MoeInputs& in, const MoePlan& plan, void* out,
                      cudaStream_t stream);

}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_MOE_MOE_LAUNCH_H_
