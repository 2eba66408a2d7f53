// The split-KV merge of MLA decode: combines each (request, query row)'s
// partials in split order, so results do not depend on scheduling. Portable
// device code (mla_merge.cu compiles with nvcc and with clang for gfx942).
#ifndef KERNELSERVE_KERNELS_GPU_MLA_MLA_MERGE_H_
#define KERNELSERVE_KERNELS_GPU_MLA_MLA_MERGE_H_

#include "kernels/gpu/common/gpu.h"
#include "kernels/gpu/mla/mla_decode_params.h"

namespace kernelserve {
namespace gpu {
namespace mla {

// Merges the partials `p.part_o` / `p.part_ml` of the layout `partials` into
// `p.out` (bf16, rows past a request's q_len as zeros), on `stream`.
cudaError_t LaunchMlaMerge(MlaPartials partials, const KParams& p, int batch, cudaStream_t stream);

}  // namespace mla
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_MLA_MLA_MERGE_H_
