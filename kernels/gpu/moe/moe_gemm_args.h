// From a validated MoE call, its plan and its workspace to the device
// parameters of the routing, the grouped GEMMs and the weighted sum: pure
// host functions that every backend's launcher (CUDA moe_launch.cc, HIP
// kernels/gpu/hip/hip_variants.cc) fills its launches from, tested on the CPU.
#ifndef KERNELSERVE_KERNELS_GPU_MOE_MOE_GEMM_ARGS_H_
#define KERNELSERVE_KERNELS_GPU_MOE_MOE_GEMM_ARGS_H_

#include <cstdint>

#include "kernels/api/ops.h"
#include "kernels/gpu/moe/moe_params.h"
#include "kernels/gpu/moe/moe_plan.h"

namespace kernelserve {
namespace gpu {
namespace moe {

// The routing over `ws` (device memory laid out as `w`).
RoutingParams MakeRoutingParams(const MoeParams& p, const MoeInputs& in, const MoePlan& plan, const MoeWorkspace& w,
                                uint8_t* ws);

// Blocks of the routing's count and scatter kernels (256 threads each).
int RoutingBlocks(int64_t pairs);

// Gate/up: x [T, K] x W13[e]^T into `out` (bf16 per pair, or SwiGLU's [pairs, I]).
GemmParams GateUpGemm(const MoeParams& p, const MoeInputs& in, const RoutingParams& r, bool swiglu, int rounding,
                      void* out);

// Down: a [pairs, I] x W2[e]^T into `out` (bf16 per pair or fp32 for the weighted sum).
GemmParams DownGemm(const MoeParams& p, const MoeInputs& in, const RoutingParams& r, const uint16_t* a, void* out);

// out[t] = sum_r topk_weights[t, r] * y[t * top_k + r].
WeightedSumParams MakeWeightedSum(const MoeParams& p, const MoeInputs& in, const float* y, void* out);

}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_MOE_MOE_GEMM_ARGS_H_
