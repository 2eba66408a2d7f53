#include "kernels/cpu/moe_routing.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kernelserve {

absl::StatusOr<MoeRouting> BuildMoeRouting(const int32_t* topk_ids, int64_t tokens, int64_t top_k,
                                           int64_t experts, int64_t block_size) {
  if (tokens < 0 || top_k <= 0 || experts <= 0 || block_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("moe routing: bad sizes tokens=", tokens, " top_k=",
                                                   top_k, " experts=", experts, " block_size=", block_size));
  }
  if (tokens > 0 && topk_ids == nullptr) {
    return absl::InvalidArgumentError("moe routing: topk_ids has no data");
  }
  MoeRouting rt;
  rt.block_size = block_size;
  rt.num_pairs = tokens * top_k;
  rt.expert_count.assign(experts, 0);
  for (int64_t i = 0; i < rt.num_pairs; ++i) {
    const int32_t e = topk_ids[i];
    if (e < 0 || e >= experts) {
      return absl::InvalidArgumentError(absl::StrCat("moe routing: topk_ids[", i / top_k, ",", i % top_k,
                                                     "] = ", e, " is not an expert in 0..", experts - 1));
    }
    ++rt.expert_count[e];
  }
  rt.expert_offset.assign(experts + 1, 0);
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t padded = (rt.expert_count[e] + block_size - 1) / block_size * block_size;
    rt.expert_offset[e + 1] = rt.expert_offset[e] + padded;
    for (int64_t b = 0; b < padded / block_size; ++b) rt.block_expert.push_back(static_cast<int32_t>(e));
  }
  rt.sorted_pairs.assign(rt.expert_offset[experts], -1);
  std::vector<int64_t> fill(rt.expert_offset.begin(), rt.expert_offset.end() - 1);
  for (int64_t i = 0; i < rt.num_pairs; ++i) {
    rt.sorted_pairs[fill[topk_ids[i]]++] = static_cast<int32_t>(i);
  }
  return rt;
}

}  // namespace kernelserve
