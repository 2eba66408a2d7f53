// MXFP4 mixture-of-experts on CUDA sm_90a: the entry points the variant
// table (moe_variants.h) and the tests call. Routing runs on the GPU (no
// host synchronization, graph capturable); weights are dequantized exactly
// to bf16 in shared memory and multiplied on the tensor cores with fp32
// accumulation; outputs are rounded once to bf16 in p.rounding. Results are
// deterministic run to run (the weighted down sum runs per token in a fixed
// order, without float atomics).
#ifndef KERNELSERVE_KERNELS_GPU_MOE_MOE_H_
#define KERNELSERVE_KERNELS_GPU_MOE_MOE_H_

#include <cuda_runtime_api.h>  // cudaStream_t

#include "absl/status/status.h"
#include "kernels/api/ops.h"
#include "kernels/api/tensor.h"
#include "kernels/gpu/moe/moe_plan.h"

namespace kernelserve {
namespace gpu {

// All views are device memory; `p` has passed MoeParams::Validate. Runs
// moe::PlanMoe(p), the plan the variant table's dispatch picks.
absl::Status RunMoe(const MoeParams& p, const MoeInputs& in, TensorView& out, cudaStream_t stream);

// Runs `plan` (a variant table entry's, or one a test forces):
// INVALID_ARGUMENT for a wrong `out`, UNIMPLEMENTED when the plan does not
// serve the shape (moe::MoeUnsupported).
absl::Status RunMoeWithPlan(const moe::MoePlan& plan, const MoeParams& p, const MoeInputs& in, TensorView& out,
                            cudaStream_t stream);

}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_MOE_MOE_H_
