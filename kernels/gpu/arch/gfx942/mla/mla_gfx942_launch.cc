#include "kernels/gpu/arch/gfx942/mla/mla_gfx942_launch.h"

#include "kernels/gpu/mla/mla_decode_args.h"

namespace kernelserve {
namespace gpu {
namespace mla {
namespace gfx942 {

static_assert(kTok % kTileTok == 0 && kTok % kPosTileTok == 0, "a split's chunk (a multiple of kTok) holds whole LDS tiles");

Cta ChooseCta(int batch, int q_len, int heads, int compute_units) {
  if (q_len < 4) return Cta::kPosition;
  const int64_t groups = (static_cast<int64_t>(q_len) * heads + kRows - 1) / kRows;
  return static_cast<int64_t>(batch) * groups * 2 <= compute_units ? Cta::kWindow : Cta::kPosition;
}

DecodeLaunch PlanDecode(const MlaDecodeParams& p, const MlaDecodeInputs& in, void* out, int compute_units) {
  DecodeLaunch l;
  const int batch = static_cast<int>(p.batch), q_len = static_cast<int>(p.q_len), heads = static_cast<int>(p.heads);
  l.cta = ChooseCta(batch, q_len, heads, compute_units);
  const bool window = l.cta == Cta::kWindow;
  l.kernel = window ? kDecodeKernel : kDecodePosKernel;
  const int cta_rows = window ? kRows : kPosRows;
  // One eight-wave CTA per CU (both kernels' occupancy): the plan's "SMs" are CUs.
  l.plan = PlanMlaSplits(batch, q_len, heads, p.max_seq, static_cast<int>(p.num_splits), compute_units, cta_rows);
  l.params = MakeKParams(p, in, out, l.plan);
  const int64_t cta_groups = (static_cast<int64_t>(q_len) * heads + cta_rows - 1) / cta_rows;
  l.grid = {static_cast<unsigned>(l.plan.splits), static_cast<unsigned>(cta_groups), static_cast<unsigned>(p.batch)};
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
