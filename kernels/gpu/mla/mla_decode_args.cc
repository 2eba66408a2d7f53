#include "kernels/gpu/mla/mla_decode_args.h"

namespace kernelserve {
namespace gpu {
namespace mla {

KParams MakeKParams(const MlaDecodeParams& p, const MlaDecodeInputs& in, void* out, const MlaSplitPlan& plan) {
  KParams k{};
  k.q_lat = in.q_lat.as<const uint16_t>();
  k.q_pe = in.q_pe.as<const uint16_t>();
  k.kv = in.kv.as<const uint8_t>();
  k.out = static_cast<uint16_t*>(out);
  k.seq_lens = p.has_seq_lens ? in.seq_lens.as<const int32_t>() : nullptr;
  k.kv_indices = in.kv_indices.as<const int32_t>();
  k.kv_indptr = in.kv_indptr.as<const int32_t>();
  k.q_lens = p.has_q_lens ? in.q_lens.as<const int32_t>() : nullptr;
  k.q_len = static_cast<int>(p.q_len);
  k.heads = static_cast<int>(p.heads);
  k.rows = k.q_len * k.heads;
  k.row_groups = plan.row_groups;
  k.splits = plan.splits;
  k.page_size = static_cast<int>(p.page_size);
  k.paged = p.paged ? 1 : 0;
  k.rounding = static_cast<int>(p.rounding);
  k.chunk = plan.chunk;
  k.kv_seq = p.paged ? 0 : in.kv.desc.shape[1];  // contiguous: the row stride of a request
  k.sl2 = static_cast<float>(p.scale * p.kv_scale * 1.4426950408889634);
  k.out_scale = static_cast<float>(p.kv_scale);
  return k;
}

int64_t PartialRows(int64_t batch, const MlaSplitPlan& plan) {
  return plan.splits > 1 ? batch * plan.row_groups * plan.splits * kRows : 0;
}

size_t WorkspaceBytes(int64_t batch, const MlaSplitPlan& plan) {
  return static_cast<size_t>(PartialRows(batch, plan)) * (kDL + 2) * sizeof(float);
}

}  // namespace mla
}  // namespace gpu
}  // namespace kernelserve
