// The weighted sum kernel (moe_weighted_sum.h), written against the vendor
// layer alone.
#include "kernels/gpu/moe/moe_weighted_sum.h"

#include <cstdint>

#include "kernels/gpu/common/bf16.cuh"

namespace kernelserve {
namespace gpu {
namespace moe {
namespace {

// out[t, n] = sum_r w[t, r] * y[t*top_k + r, n], r in order.
__global__ void MoeWeightedSumKernel(const float* y, const float* w, int top_k, int64_t n, uint16_t* out,
                                     int rounding) {
  const int64_t t = blockIdx.x;
  for (int64_t c = 2 * threadIdx.x; c < n; c += 2 * blockDim.x) {
    float s0 = 0.f, s1 = 0.f;
    for (int r = 0; r < top_k; ++r) {
      const float wt = w[t * top_k + r];
      const float2 v = *reinterpret_cast<const float2*>(y + (t * top_k + r) * n + c);
      s0 = fmaf(wt, v.x, s0);
      s1 = fmaf(wt, v.y, s1);
    }
    *reinterpret_cast<uint32_t*>(out + t * n + c) = PackBf16x2(s0, s1, rounding);
  }
}

}  // namespace

cudaError_t LaunchMoeWeightedSum(const WeightedSumParams& p, cudaStream_t stream) {
  MoeWeightedSumKernel<<<static_cast<unsigned>(p.tokens), 256, 0, stream>>>(p.y, p.weights, p.top_k, p.n, p.out,
                                                                           p.rounding);
  return cudaGetLastError();
}

}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve
