// The split forward's indexing end to end on the CPU: every CTA of a plan
// (WsCtaAt, TileAt, KvBlocks, ChunkBegin) runs an fp32 online softmax over
// its key range, whole items write their rows, chunks write (m, l, O) at
// WsPartialRow as the kernel's epilogue does, and the merge reads them back
// at the merge kernel's indices through MergeChunks; the output against an
// fp64 softmax, every row written exactly once. Small slot counts give
// grids of full waves plus a tail, forced splits give empty chunks. What
// this cannot see is the device code's arithmetic (the wgmma, bf16 P): the
// CUDA test holds that to the oracle.
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/gpu/arch/sm90/attention/ws_plan.h"
#include "kernels/gpu/attention/dense_tail.h"
#include "kernels/gpu/attention/flash_params.h"
#include "kernels/gpu/attention/tile_scheduler.h"

namespace kernelserve {
namespace gpu {
namespace attention {
namespace {

struct Problem {
  int batch, heads_q, heads_kv, seq_q, seq_kv, dim;
  bool causal;
};

// BHSD tensors of random floats.
struct Tensors {
  std::vector<float> q, k, v;
};

Tensors Random(const Problem& pr, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  Tensors t;
  t.q.resize(static_cast<size_t>(pr.batch) * pr.heads_q * pr.seq_q * pr.dim);
  t.k.resize(static_cast<size_t>(pr.batch) * pr.heads_kv * pr.seq_kv * pr.dim);
  t.v.resize(t.k.size());
  for (float& x : t.q) x = n(rng);
  for (float& x : t.k) x = n(rng);
  for (float& x : t.v) x = 0.5f + n(rng);
  return t;
}

FlashFwdParams Params(const Problem& pr) {
  FlashFwdParams p;
  p.batch = pr.batch;
  p.heads_q = pr.heads_q;
  p.heads_kv = pr.heads_kv;
  p.group = pr.heads_q / pr.heads_kv;
  p.seq_q = pr.seq_q;
  p.seq_kv = pr.seq_kv;
  p.causal_offset = pr.seq_kv - pr.seq_q;
  p.scale_log2 = static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(pr.dim)));
  return p;
}

const float* Row(const std::vector<float>& t, int heads, int seq, int dim, int b, int h, int i) {
  return t.data() + ((static_cast<size_t>(b) * heads + h) * seq + i) * dim;
}

// The reference: one fp64 softmax over the keys row i sees.
std::vector<double> Reference(const Problem& pr, const FlashFwdParams& p, const Tensors& t, int b, int h, int i) {
  std::vector<double> o(pr.dim, 0.0);
  const int hk = h / p.group;
  const float* q = Row(t.q, pr.heads_q, pr.seq_q, pr.dim, b, h, i);
  std::vector<double> s;
  double m = -INFINITY;
  const int last = pr.causal ? std::min(pr.seq_kv - 1, i + p.causal_offset) : pr.seq_kv - 1;
  for (int j = 0; j <= last; ++j) {
    const float* k = Row(t.k, pr.heads_kv, pr.seq_kv, pr.dim, b, hk, j);
    double dot = 0;
    for (int d = 0; d < pr.dim; ++d) dot += static_cast<double>(q[d]) * k[d];
    s.push_back(dot * p.scale_log2);
    m = std::max(m, s.back());
  }
  if (s.empty()) return o;
  double l = 0;
  for (int j = 0; j <= last; ++j) {
    const double e = std::exp2(s[j] - m);
    l += e;
    const float* v = Row(t.v, pr.heads_kv, pr.seq_kv, pr.dim, b, hk, j);
    for (int d = 0; d < pr.dim; ++d) o[d] += e * v[d];
  }
  for (double& x : o) x /= l;
  return o;
}

// Runs the plan on the CPU; returns the relative RMS error against the
// reference and fails on rows written twice or never.
double Emulate(const Problem& pr, const WsLaunchPlan& plan, const Tensors& t) {
  const FlashFwdParams p = Params(pr);
  const int bn = WsBlockN(pr.dim, pr.causal);
  const size_t out_rows = static_cast<size_t>(pr.batch) * pr.heads_q * pr.seq_q;
  std::vector<float> out(out_rows * pr.dim, NAN);
  std::vector<int> writes(out_rows, 0);
  const size_t part_rows = plan.tail.on ? plan.part_ml / (sizeof(float) * pr.dim) : 0;
  EXPECT_GE(plan.part_ml, static_cast<size_t>(plan.tail.tail_items) * plan.tail.splits * kWsBlockM * pr.dim * 4);
  std::vector<float> part_o(part_rows * pr.dim, NAN), part_ml(part_rows * 2, NAN);
  auto out_index = [&](const WorkTile& tile, int row) {
    return (static_cast<size_t>(tile.batch) * pr.heads_q + tile.head) * pr.seq_q + row;
  };

  for (int c = 0; c < plan.tail.ctas; ++c) {
    const WsCta cta = WsCtaAt(c, plan.tail.full_items, plan.tail.splits);
    const WorkTile tile = TileAt(cta.item, plan.order);
    const int m0 = tile.m_block * kWsBlockM;
    const int n_all = KvBlocks(p.seq_kv, m0, kWsBlockM, bn, p.causal_offset, pr.causal);
    const int nb0 = cta.chunk ? ChunkBegin(n_all, cta.split, plan.tail.splits) : 0;
    const int nb1 = cta.chunk ? ChunkBegin(n_all, cta.split + 1, plan.tail.splits) : n_all;
    const int hk = tile.head / p.group;
    for (int r = 0; r < kWsBlockM; ++r) {
      const int row = m0 + r;
      if (row >= pr.seq_q) continue;  // the kernel computes these on zero-filled Q; nobody reads them
      const float* q = Row(t.q, pr.heads_q, pr.seq_q, pr.dim, tile.batch, tile.head, row);
      float m = -INFINITY, l = 0.f;
      std::vector<float> o(pr.dim, 0.f);
      for (int j = nb0 * bn; j < nb1 * bn && j < pr.seq_kv; ++j) {
        if (pr.causal && j > row + p.causal_offset) continue;
        const float* k = Row(t.k, pr.heads_kv, pr.seq_kv, pr.dim, tile.batch, hk, j);
        float dot = 0.f;
        for (int d = 0; d < pr.dim; ++d) dot += q[d] * k[d];
        const float sc = dot * p.scale_log2;
        const float m_new = std::max(m, sc);
        const float alpha = m == -INFINITY ? 0.f : std::exp2(m - m_new);
        const float e = std::exp2(sc - m_new);
        const float* v = Row(t.v, pr.heads_kv, pr.seq_kv, pr.dim, tile.batch, hk, j);
        for (int d = 0; d < pr.dim; ++d) o[d] = o[d] * alpha + e * v[d];
        l = l * alpha + e;
        m = m_new;
      }
      if (cta.chunk) {
        const int64_t prow = WsPartialRow(cta.item, cta.split, plan.tail.full_items, plan.tail.splits) + r;
        EXPECT_LT(static_cast<size_t>(prow), part_rows);
        part_ml[prow * 2] = m;
        part_ml[prow * 2 + 1] = l;
        for (int d = 0; d < pr.dim; ++d) part_o[prow * pr.dim + d] = o[d];
      } else {
        const size_t at = out_index(tile, row);
        ++writes[at];
        for (int d = 0; d < pr.dim; ++d) out[at * pr.dim + d] = l == 0.f ? 0.f : o[d] / l;
      }
    }
  }
  // The merge kernel's grid: (tail item, row block), one thread per column.
  for (unsigned t_idx = 0; t_idx < plan.merge_grid_x; ++t_idx) {
    const WorkTile tile = TileAt(plan.tail.full_items + static_cast<int>(t_idx), plan.order);
    for (unsigned y = 0; y < plan.merge_grid_y; ++y) {
      for (int thread = 0; thread < kWsMergeThreads; ++thread) {
        const int r = static_cast<int>(y) * (kWsMergeThreads / pr.dim) + thread / pr.dim;
        const int d = thread % pr.dim;
        const int row = tile.m_block * kWsBlockM + r;
        if (row >= pr.seq_q) continue;
        const int64_t base =
            WsPartialRow(plan.tail.full_items + static_cast<int>(t_idx), 0, plan.tail.full_items, plan.tail.splits) +
            r;
        const size_t at = out_index(tile, row);
        if (d == 0) ++writes[at];
        out[at * pr.dim + d] = MergeChunks(plan.tail.splits, part_ml.data() + base * 2, int64_t{kWsBlockM} * 2,
                                           part_o.data() + base * pr.dim + d, int64_t{kWsBlockM} * pr.dim);
      }
    }
  }

  double num = 0, den = 0;
  int64_t bad_writes = 0;
  for (int b = 0; b < pr.batch; ++b) {
    for (int h = 0; h < pr.heads_q; ++h) {
      for (int i = 0; i < pr.seq_q; ++i) {
        const size_t at = (static_cast<size_t>(b) * pr.heads_q + h) * pr.seq_q + i;
        if (writes[at] != 1 && bad_writes++ < 5) {
          ADD_FAILURE() << "row (" << b << ", " << h << ", " << i << ") written " << writes[at] << " times";
        }
        const std::vector<double> want = Reference(pr, p, t, b, h, i);
        for (int d = 0; d < pr.dim; ++d) {
          const double got = out[at * pr.dim + d];
          num += (got - want[d]) * (got - want[d]);
          den += want[d] * want[d];
        }
      }
    }
  }
  EXPECT_EQ(bad_writes, 0);
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

TEST(WsPlanEmulation, SplitGridsMatchAnFp64Softmax) {
  const Problem problems[] = {
      {2, 4, 2, 300, 700, 64, false},   // GQA, ragged
      {2, 4, 2, 300, 700, 64, true},    // causal, Sq < Skv
      {1, 2, 2, 333, 47, 128, true},    // Sq > Skv: rows that see no key
      {1, 3, 1, 1, 513, 256, true},     // one query row, 64-key tiles
      {1, 2, 1, 260, 260, 256, false},  // 64-key tiles, ragged
  };
  uint32_t seed = std::random_device{}();
  for (const Problem& pr : problems) {
    for (int slots : {5, 7, 132}) {
      for (int dense_tail : {-1, 0, 1, 2, 3, 7}) {
        WsLaunchOptions opt;
        opt.dense_tail = dense_tail;
        const WsLaunchPlan plan = PlanWsLaunch(Params(pr), pr.dim, pr.causal, slots, opt);
        SCOPED_TRACE(testing::Message() << "B" << pr.batch << " Hq" << pr.heads_q << " Sq" << pr.seq_q << " Skv"
                                        << pr.seq_kv << " d" << pr.dim << (pr.causal ? " causal" : "") << " slots "
                                        << slots << " dense_tail " << dense_tail << " seed " << seed
                                        << (plan.tail.on ? " split " : " whole ") << plan.tail.tail_items << " x "
                                        << plan.tail.splits);
        if (dense_tail >= 2) {
          EXPECT_TRUE(plan.tail.on);
        }
        const Tensors t = Random(pr, seed++);
        EXPECT_LT(Emulate(pr, plan, t), 1e-5);
      }
    }
  }
}

}  // namespace
}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve
