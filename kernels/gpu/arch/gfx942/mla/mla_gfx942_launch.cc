#include "kernels/gpu/arch/gfx942/mla/mla_gfx942_launch.h"

#include "kernels/gpu/mla/mla_decode_args.h"

namespace kernelserve {
namespace gpu {
namespace mla {
namespace gfx942 {

static_assert(kTok % kTileTok == 0, "a split's chunk (a multiple of kTok) holds whole LDS tiles");

DecodeLaunch PlanDecode(const MlaDecodeParams& p, const MlaDecodeInputs& in, void* out, int compute_units) {
  DecodeLaunch l;
  // One eight-wave CTA per CU (the kernel's occupancy): the plan's "SMs" are CUs.
  l.plan = PlanMlaSplits(static_cast<int>(p.batch), static_cast<int>(p.q_len), static_cast<int>(p.heads), p.max_seq,
                         static_cast<int>(p.num_splits), compute_units);
  l.params = MakeKParams(p, in, out, l.plan);
  l.grid = {static_cast<unsigned>(l.plan.splits), static_cast<unsigned>(l.plan.row_groups),
            static_cast<unsigned>(p.batch)};
  l.merge = l.plan.splits > 1;
  l.workspace_bytes = WorkspaceBytes(p.batch, l.plan);
  if (l.merge) l.merge_grid = {static_cast<unsigned>(l.params.rows), static_cast<unsigned>(p.batch), 1};
  return l;
}

void SetWorkspace(DecodeLaunch& l, void* workspace) {
  if (!l.merge) return;
  l.params.part_o = static_cast<float*>(workspace);
  l.params.part_ml = l.params.part_o + PartialRows(l.grid.z, l.plan) * kDL;
}

}  // namespace gfx942
}  // namespace mla
}  // namespace gpu
}  // namespace kernelserve
