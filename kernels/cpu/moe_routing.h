// MoE routing step shared by backends: groups the (token, expert) pairs of a
// top-k routing by expert, each expert's group padded to a multiple of a
// block size, so a grouped GEMM can take one expert per block of rows (the
// layout of vLLM's moe_align_block_size). Deterministic: experts ascend, and
// within an expert pairs keep their token-major order.
#ifndef KERNELSERVE_KERNELS_CPU_MOE_ROUTING_H_
#define KERNELSERVE_KERNELS_CPU_MOE_ROUTING_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace kernelserve {

struct MoeRouting {
  int64_t block_size = 0;
  int64_t num_pairs = 0;  // tokens * top_k
  // Pair ids (t * top_k + r) grouped by expert; each group padded with -1 to
  // a multiple of block_size. Size num_blocks * block_size.
  std::vector<int32_t> sorted_pairs;
  // Expert of each block of sorted_pairs.
  std::vector<int32_t> block_expert;
  // [E + 1]: offset of expert e's padded group in sorted_pairs.
  std::vector<int64_t> expert_offset;
  // [E]: pairs routed to expert e (before padding).
  std::vector<int32_t> expert_count;

  int64_t num_blocks() const { return static_cast<int64_t>(block_expert.size()); }
};

// topk_ids: [tokens, top_k] host int32, each in [0, experts). Experts with no
// pair get no block. INVALID_ARGUMENT for an id out of range or a
// non-positive size.
absl::StatusOr<MoeRouting> BuildMoeRouting(const int32_t* topk_ids, int64_t tokens, int64_t top_k,
                                           int64_t experts, int64_t block_size);

}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_CPU_MOE_ROUTING_H_
