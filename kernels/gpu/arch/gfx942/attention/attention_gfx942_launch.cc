#include "kernels/gpu/arch/gfx942/attention/attention_gfx942_launch.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"

namespace kernelserve {
namespace gpu {
namespace attention {
namespace gfx942 {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
size_t Align256(size_t n) { return (n + 255) / 256 * 256; }

// The forward's grid is one dimension of CTAs of kThreads; HSA's dispatch
// packet holds its size in work-items as 32 bits.
constexpr int64_t kMaxCtas = (int64_t{1} << 32) / kThreads / kMaxSplits;

}  // namespace

const HdimKernels& KernelsOf(int head_dim) {
  for (const HdimKernels& k : kKernels) {
    if (k.head_dim == head_dim) return k;
  }
  return kKernels[1];  // 128; Unsupported declines other head dims first
}

std::string Unsupported(const AttentionParams& p) {
  if (p.head_dim != 64 && p.head_dim != 128 && p.head_dim != 256) {
    return absl::StrCat("attention: the hip backend serves head_dim 64, 128 or 256 (got ", p.head_dim, ")");
  }
  const FwdShape s = ShapeOf(static_cast<int>(p.head_dim));
  // One head's K rows are read through a buffer resource with 32-bit byte
  // offsets (hardware bounds return zeros past seq_kv), up to two tiles past
  // the last key (the prefetch after the last tile).
  const int64_t k_row_stride = p.layout == Layout::kBshd ? p.heads_kv * p.head_dim : p.head_dim;
  if ((p.seq_kv + 2 * kTileTok) * k_row_stride * 2 >= (int64_t{1} << 31)) {
    return absl::StrCat("attention: the hip backend addresses one head's K rows with 31-bit byte offsets: seq_kv ",
                        p.seq_kv, " at a row stride of ", k_row_stride, " elements is too long");
  }
  // V^T of one head, head_dim columns of seq_kv rounded up to kVtTok keys,
  // goes through a buffer resource too.
  if ((p.seq_kv + kVtTok) * p.head_dim * 2 >= (int64_t{1} << 31)) {
    return absl::StrCat("attention: the hip backend addresses one head's V^T with 31-bit byte offsets: seq_kv ",
                        p.seq_kv, " is too long");
  }
  const int64_t items = CeilDiv(p.seq_q, s.rows()) * p.heads_q * p.batch;
  if (items > kMaxCtas) {
    return absl::StrCat("attention: the hip backend's grid holds at most ", kMaxCtas, " blocks of ", s.rows(),
                        " query rows (got ", items, ")");
  }
  return "";
}

DenseTailPlan PlanDenseTail(int q_blocks, int slots, int tail_kv_tiles) {
  return attention::PlanDenseTail(q_blocks, slots, tail_kv_tiles, kDenseTailWeights);
}

AttentionLaunch PlanAttention(const FlashFwdParams& f, int head_dim, bool causal, int compute_units) {
  AttentionLaunch l;
  const FwdShape s = ShapeOf(head_dim);
  const int rows = s.rows();
  l.shape = s;
  Gfx942AttnParams& p = l.params;
  p.f = f;
  p.head_dim = s.head_dim;
  p.q_blocks = static_cast<int>(CeilDiv(f.seq_q, rows));
  p.vt_len = static_cast<int>(CeilDiv(f.seq_kv, kVtTok) * kVtTok);
  p.vt_head_stride = static_cast<int64_t>(s.head_dim) * p.vt_len;
  const int items = p.q_blocks * f.heads_q * f.batch;
  // The longest item of the last partial round is its first (WorkItemAt).
  const int slots = compute_units * s.ctas_per_cu;
  const int tail = items % slots;
  const int first_tail = items - (tail == 0 ? slots : tail);
  const int tail_tiles =
      ItemKvTiles(f, rows, WorkItemAt(std::max(first_tail, 0), p.q_blocks, f.heads_q, f.batch).qb, causal);
  l.tail = PlanDenseTail(items, slots, tail_tiles);
  p.full_items = l.tail.full_items;
  p.tail_items = l.tail.tail_items;
  p.splits = l.tail.splits;
  const HdimKernels& k = KernelsOf(s.head_dim);
  l.kernel = causal ? k.causal : k.fwd;
  l.v_transpose = k.v_transpose;
  l.merge = k.merge;

  Workspace& w = l.workspace;
  w.vt = 0;
  size_t at = Align256(static_cast<size_t>(f.batch) * f.heads_kv * p.vt_head_stride * 2);
  if (l.tail.on) {
    const size_t part_rows = static_cast<size_t>(l.tail.tail_items) * l.tail.splits * rows;
    w.part_o = at;
    at += Align256(part_rows * s.head_dim * 4);
    w.part_ml = at;
    at += Align256(part_rows * 2 * 4);
  }
  w.bytes = at;

  l.vt_grid = {static_cast<unsigned>(p.vt_len / kVtTok), static_cast<unsigned>(f.heads_kv),
               static_cast<unsigned>(f.batch)};
  l.fwd_grid = {static_cast<unsigned>(l.tail.ctas), 1, 1};
  if (l.tail.on) {
    l.merge_grid = {static_cast<unsigned>(l.tail.tail_items * (rows / MergeRowsPerBlock(s))), 1, 1};
  }
  return l;
}

void SetWorkspace(AttentionLaunch& l, void* workspace) {
  uint8_t* base = static_cast<uint8_t*>(workspace);
  l.params.vt = reinterpret_cast<uint16_t*>(base + l.workspace.vt);
  if (!l.tail.on) return;
  l.params.part_o = reinterpret_cast<float*>(base + l.workspace.part_o);
  l.params.part_ml = reinterpret_cast<float*>(base + l.workspace.part_ml);
}

}  // namespace gfx942
}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve
