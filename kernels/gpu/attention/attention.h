// Host entry of the GPU bf16 MHA forward (DESIGN §4): the run functions of
// the variant table's entries (attention_variants.cc), each checking the views
// against validated params (attention_params.h) and launching its kernel for
// the head dim and mask, asynchronously on `stream`. Launch errors come back
// as a status (UNAVAILABLE for sticky faults).
#ifndef KERNELSERVE_KERNELS_GPU_ATTENTION_ATTENTION_H_
#define KERNELSERVE_KERNELS_GPU_ATTENTION_ATTENTION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/api/ops.h"
#include "kernels/api/tensor.h"
#include "kernels/gpu/common/gpu.h"

namespace kernelserve {
namespace gpu {

// The warp-specialized wgmma kernel: head dims 64, 128 and 256 (others: UNIMPLEMENTED).
absl::Status RunAttentionWgmmaWs(const AttentionParams& p, const TensorView& q, const TensorView& k,
                                 const TensorView& v, TensorView& out, cudaStream_t stream);

// Overrides of the wgmma_ws launch plan, process-wide, for tests and A/B
// timing (attention_cuda_test, bench/attention_cuda_bench.cc); the default
// is the plan's own choice. dense_tail < 0: the cost model decides the
// dense-tail KV split; 0: never split; 1: split the last wave whenever there
// is one, as many chunks as its idle SMs allow; n >= 2: exactly n chunks per
// item of the last wave. per_head_causal_order: causal grids one (head,
// batch) after another instead of in L2 sections
// (kernels/gpu/attention/tile_scheduler.h).
void SetWgmmaWsPlanOverride(int dense_tail, bool per_head_causal_order);

// Rounds n floats (device memory) to bf16 bits with the kernels' epilogue
// rounding; for testing the device rounding against numerics::FloatToBf16.
absl::Status RoundToBf16(const float* in, uint16_t* out, int64_t n, Rounding mode, cudaStream_t stream);

}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ATTENTION_ATTENTION_H_
