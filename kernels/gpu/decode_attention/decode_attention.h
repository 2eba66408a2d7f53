// Decode attention over a PER_HEAD_KV pool on the GPU (numerics in
// kernels/api/ops.h, DecodeAttentionParams): the launcher the CUDA backend
// calls. Scores and outputs accumulate in fp32 and results are deterministic
// run to run (warps and splits combine in a fixed order).
#ifndef KERNELSERVE_KERNELS_GPU_DECODE_ATTENTION_DECODE_ATTENTION_H_
#define KERNELSERVE_KERNELS_GPU_DECODE_ATTENTION_DECODE_ATTENTION_H_

#include <string>

#include "absl/status/status.h"
#include "kernels/api/ops.h"
#include "kernels/api/tensor.h"
#include "kernels/gpu/common/gpu.h"
#include "kernels/gpu/decode_attention/decode_attention_params.h"
#include "kernels/gpu/decode_attention/decode_split_plan.h"

namespace kernelserve {
namespace gpu {

// Empty when this build has a kernel for the call on a device of compute
// capability cc_major.cc_minor, else why not (sm_90a only).
std::string DecodeAttentionUnsupported(int cc_major, int cc_minor, const DecodeAttentionParams &p);

// The split plan a call gets on the current device (for tests and the bench).
absl::StatusOr<decode::DecodeSplitPlan> DecodeAttentionPlan(const DecodeAttentionParams &p);

// Runs the call: all views are device memory, the pool's read in place; `p`
// has passed DecodeAttentionParams::Validate. Plans the split from the shape
// (decode_split_plan.h), launches the kernel over (row groups, Hkv x splits,
// batch) and, with several splits, the merge, on `stream` without a host
// synchronization. May be captured into a CUDA graph: the split is a function
// of p (max_seq), so replays must not exceed the captured max_seq.
absl::Status RunDecodeAttention(const DecodeAttentionParams &p, const DecodeAttentionInputs &in, TensorView &out,
                                cudaStream_t stream);

}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_DECODE_ATTENTION_DECODE_ATTENTION_H_
