// The split-KV merge of decode attention: combines each (request, query
// row)'s partials in a fixed order, so results do not depend on scheduling.
#ifndef KERNELSERVE_KERNELS_GPU_DECODE_ATTENTION_DECODE_MERGE_H_
#define KERNELSERVE_KERNELS_GPU_DECODE_ATTENTION_DECODE_MERGE_H_

#include "kernels/gpu/common/gpu.h"
#include "kernels/gpu/decode_attention/decode_attention_params.h"

namespace kernelserve {
namespace gpu {
namespace decode {

// Merges `p.part_o` / `p.part_ml` into `p.out` (bf16, rows past a request's
// window as zeros) for `batch` requests of `head_dim`, on `stream`.
cudaError_t LaunchDecodeMerge(const KParams &p, int batch, int head_dim, cudaStream_t stream);

}  // namespace decode
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_DECODE_ATTENTION_DECODE_MERGE_H_
