// From a validated MLA decode call (the host-side arguments) to the kernels'
// device parameters and workspace: pure functions, tested on the CPU.
#ifndef KERNELSERVE_KERNELS_GPU_MLA_MLA_DECODE_ARGS_H_
#define KERNELSERVE_KERNELS_GPU_MLA_MLA_DECODE_ARGS_H_

#include <cstddef>
#include <cstdint>

#include "kernels/api/ops.h"
#include "kernels/gpu/mla/mla_decode_params.h"
#include "kernels/gpu/mla/mla_split_plan.h"

namespace kernelserve {
namespace gpu {
namespace mla {

// `p` has passed MlaDecodeParams::Validate; `in`'s views and `out` are device
// memory. The workspace pointers (part_o, part_ml) are left null.
KParams MakeKParams(const MlaDecodeParams& p, const MlaDecodeInputs& in, void* out, const MlaSplitPlan& plan);

// Partial rows of a split call, (request, row group, split, row); 0 with one
// split (nothing to merge).
int64_t PartialRows(int64_t batch, const MlaSplitPlan& plan);

// The workspace of the partials: PartialRows x (512 fp32 of O, then 2 fp32
// of (m, l)), which holds either layout of MlaPartials.
size_t WorkspaceBytes(int64_t batch, const MlaSplitPlan& plan);

}  // namespace mla
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_MLA_MLA_DECODE_ARGS_H_
