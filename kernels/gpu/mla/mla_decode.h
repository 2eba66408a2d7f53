// MLA absorbed decode (a16w8) on the GPU: the launcher the variant table's
// entries call (mla_decode_variants.cc). Scores and outputs accumulate in
// fp32 and results are deterministic run to run; each kernel states its
// numerics (kernels/gpu/arch/sm90/mla/). Tests: rel. RMS < 6e-3 against the
// fp64 oracle.
#ifndef KERNELSERVE_KERNELS_GPU_MLA_MLA_DECODE_H_
#define KERNELSERVE_KERNELS_GPU_MLA_MLA_DECODE_H_

#include "absl/status/status.h"
#include "kernels/api/ops.h"
#include "kernels/api/tensor.h"
#include "kernels/gpu/common/gpu.h"
#include "kernels/gpu/mla/mla_decode_params.h"

namespace kernelserve {
namespace gpu {

// Runs `kernel` on a call: all views are device memory; `p` has passed
// MlaDecodeParams::Validate and `kernel` serves p.kv_dtype. Plans the split
// (mla_split_plan.h), launches the kernel over the grid (splits, row groups,
// batch) and, with several splits, the merge, on `stream` without a host
// synchronization. May be captured into a CUDA graph: the split is a function
// of p (max_seq), so replays must not exceed the captured max_seq.
absl::Status RunMlaDecode(const mla::DecodeKernel& kernel, const MlaDecodeParams& p, const MlaDecodeInputs& in,
                          TensorView& out, cudaStream_t stream);

}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_MLA_MLA_DECODE_H_
