// The tile scheduler of the bf16 MHA forward kernels: the order in which the
// CTAs of a one-dimensional grid take the work items (query tile, head,
// batch), and the key tiles a query tile visits. Pure functions, the same on
// the host (launchers, CPU tests) and in every kernel.
//
// The hardware hands out CTAs in grid order as SMs free up, so the order is
// the schedule. Without a mask every item is as long as every other and the
// order serves L2: one (head, batch)'s query tiles in turn share its K and V.
// Under a causal mask the items differ in length (the last query tile of a
// head visits every key tile, the first one tile), and the longest must go
// first so that the shortest fill the end of the grid: sections of a few
// (batch, head) pairs whose K and V fit in L2 together, within a section the
// query tiles longest first, the section's pairs side by side.
#ifndef KERNELSERVE_KERNELS_GPU_ATTENTION_TILE_SCHEDULER_H_
#define KERNELSERVE_KERNELS_GPU_ATTENTION_TILE_SCHEDULER_H_

#include <cstdint>

#include "kernels/gpu/common/host_device.h"

namespace kernelserve {
namespace gpu {
namespace attention {

struct WorkTile {
  int m_block;  // query rows [m_block * kBlockM, (m_block + 1) * kBlockM)
  int head;
  int batch;
};

struct TileOrder {
  int m_blocks;  // query tiles per (head, batch)
  int heads;     // query heads
  int batch;
  // 0: each (head, batch)'s query tiles in turn, longest (last) first, heads
  // then batches; > 0: sections of `section` (batch, head) pairs, within a
  // section the query tiles longest first with the section's pairs together.
  int section;
};

KS_HOST_DEVICE int TileCount(const TileOrder& o) { return o.m_blocks * o.heads * o.batch; }

// The work item of CTA u of TileCount(o).
KS_HOST_DEVICE WorkTile TileAt(int u, const TileOrder& o) {
  if (o.section <= 0) {
    const int hb = u / o.m_blocks;
    return WorkTile{o.m_blocks - 1 - (u - hb * o.m_blocks), hb % o.heads, hb / o.heads};
  }
  const int per_section = o.m_blocks * o.section;
  const int sec = u / per_section;
  const int r = u - sec * per_section;
  const int pairs_left = o.heads * o.batch - sec * o.section;
  const int n = pairs_left < o.section ? pairs_left : o.section;  // the last section may be smaller
  const int hb = sec * o.section + r % n;
  return WorkTile{o.m_blocks - 1 - r / n, hb % o.heads, hb / o.heads};
}

// The (batch, head) pairs of a causal section: as many as keep their K and
// V (seq_kv x head_dim bf16 each, shared by the `group` query heads of a KV
// head) within kCausalSectionBytes, at least one. 32 MiB: FlashAttention-3's
// figure for an L2 of 50 MB (H100, H200), the rest left to Q, O and the
// other sections' stragglers.
constexpr int64_t kCausalSectionBytes = int64_t{32} << 20;
KS_HOST_DEVICE int CausalSection(int heads, int batch, int group, int seq_kv, int head_dim) {
  const int64_t kv_bytes = int64_t{4} * (seq_kv > 1 ? seq_kv : 1) * head_dim;  // K and V of one KV head
  const int64_t pairs = kCausalSectionBytes / kv_bytes * (group > 1 ? group : 1);
  const int64_t all = static_cast<int64_t>(heads) * batch;
  return static_cast<int>(pairs < 1 ? 1 : pairs > all ? all : pairs);
}

// CUDA's device min is one instruction the optimizer keeps as written.
KS_HOST_DEVICE int Min(int a, int b) {
#if defined(__CUDA_ARCH__)
  return min(a, b);
#else
  return b < a ? b : a;
#endif
}

// Tiles of block_n keys that query rows [m0, m0 + block_m) visit: all of
// them, or under the causal mask (query i sees keys j <= i + causal_offset)
// those up to the last row's limit; 0 when no row sees a key.
KS_HOST_DEVICE int KvBlocks(int seq_kv, int m0, int block_m, int block_n, int causal_offset, bool causal) {
  int n_blocks = (seq_kv + block_n - 1) / block_n;
  if (causal) {
    const int last_key = Min(seq_kv - 1, m0 + block_m - 1 + causal_offset);
    n_blocks = last_key < 0 ? 0 : Min(n_blocks, last_key / block_n + 1);
  }
  return n_blocks;
}

}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ATTENTION_TILE_SCHEDULER_H_
