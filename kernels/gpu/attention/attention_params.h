// Host-side arguments -> device params of the bf16 MHA forward (DESIGN §4):
// validated AttentionParams and the views become a FlashFwdParams, or the
// status of a call no kernel can take. Pure host code (no vendor header), so
// its tests run on the CPU in every build.
#ifndef KERNELSERVE_KERNELS_GPU_ATTENTION_ATTENTION_PARAMS_H_
#define KERNELSERVE_KERNELS_GPU_ATTENTION_ATTENTION_PARAMS_H_

#include "absl/status/statusor.h"
#include "kernels/api/ops.h"
#include "kernels/api/tensor.h"
#include "kernels/gpu/attention/flash_params.h"

namespace kernelserve {
namespace gpu {
namespace attention {

// INVALID_ARGUMENT for views that do not match `p` (dtype, shape, no data)
// or params that did not pass Validate; UNIMPLEMENTED for a head dim other
// than 64, 128, 256, data not 16-byte aligned, or sizes past the kernels'
// grid (batch and heads <= 65535, sequences < 2^30). A call with nothing to
// compute (HasWork false) is not checked further.
absl::StatusOr<FlashFwdParams> MakeFlashFwdParams(const AttentionParams& p, const TensorView& q,
                                                  const TensorView& k, const TensorView& v,
                                                  const TensorView& out);

// False when the output is empty (batch, heads or query rows 0).
inline bool HasWork(const FlashFwdParams& fp) { return fp.batch > 0 && fp.heads_q > 0 && fp.seq_q > 0; }

}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ATTENTION_ATTENTION_PARAMS_H_
