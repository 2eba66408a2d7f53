#include "kernels/gpu/arch/sm90/attention/ws_plan.h"

#include <cstddef>

namespace kernelserve {
namespace gpu {
namespace attention {
namespace {

size_t Align256(size_t n) { return (n + 255) / 256 * 256; }

}  // namespace

WsLaunchPlan PlanWsLaunch(const FlashFwdParams& p, int head_dim, bool causal, int slots, const WsLaunchOptions& opt) {
  WsLaunchPlan l;
  l.slots = slots;
  const int m_blocks = (p.seq_q + kWsBlockM - 1) / kWsBlockM;
  const int section = causal && !opt.per_head_causal_order
                          ? CausalSection(p.heads_q, p.batch, p.group, p.seq_kv, head_dim)
                          : 0;
  l.order = TileOrder{m_blocks, p.heads_q, p.batch, section};
  const int items = TileCount(l.order);
  // The longest item of the last (partial, else last full) wave is its
  // first: the orders put shorter items later.
  const int tail = items % slots;
  const int first_tail = items - (tail == 0 ? (items < slots ? items : slots) : tail);
  l.tail_kv_tiles = KvBlocks(p.seq_kv, TileAt(first_tail, l.order).m_block * kWsBlockM, kWsBlockM,
                             WsBlockN(head_dim, causal), p.causal_offset, causal);
  if (opt.dense_tail < 0) {
    l.tail = PlanDenseTail(items, slots, l.tail_kv_tiles, kWsDenseTailWeights);
  } else if (opt.dense_tail == 0) {
    l.tail = PlanDenseTail(items, slots, 0, kWsDenseTailWeights);  // no K tile to save: off
    l.tail.cost_off = l.tail_kv_tiles;
  } else {
    l.tail = ForceDenseTail(items, slots, l.tail_kv_tiles, opt.dense_tail == 1 ? 0 : opt.dense_tail,
                            kWsDenseTailWeights);
  }
  if (l.tail.on) {
    const size_t rows = static_cast<size_t>(l.tail.tail_items) * l.tail.splits * kWsBlockM;
    l.part_o = 0;
    l.part_ml = Align256(rows * head_dim * sizeof(float));
    l.workspace_bytes = l.part_ml + Align256(rows * 2 * sizeof(float));
    l.merge_grid_x = static_cast<unsigned>(l.tail.tail_items);
    l.merge_grid_y = static_cast<unsigned>(kWsBlockM * head_dim / kWsMergeThreads);
  }
  return l;
}

}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve
