// MLA absorbed decode (a16w8) on the cpu (DESIGN §4). A request's query rows
// (draft position t, head h) form row r = t*H + h, so all heads share each
// decoded KV tile: scores are a [rows x 576] . [576 x 64] tile product and the
// output a [rows x 64] . [64 x 512] one, reusing the attention tile kernels.
// KV is split into contiguous ranges of 64-key tiles; each split keeps its own
// (max, sum, O) per row, and the splits are merged in fp32 in split order, so
// a result depends only on the split count, never on thread timing or on where
// the rows sit in a pool.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/api/ops.h"
#include "kernels/cpu/cpu_attention_tiles.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/numerics/numerics.h"

namespace kernelserve {
namespace cpu {
namespace {

using tiles::kBk;
using tiles::kBq;
using tiles::kLog2e;
using tiles::kNegInf;
constexpr int kDk = static_cast<int>(kMlaRowDim);     // 576
constexpr int kDl = static_cast<int>(kMlaLatentDim);  // 512
constexpr int64_t kMaxAutoSplits = 16;

struct MlaCtx {
  const MlaDecodeParams* p;
  const uint16_t* q_lat;
  const uint16_t* q_pe;
  const uint8_t* kv;
  const float* table;
  const int32_t* seq_lens;
  const int32_t* kv_indices;
  const int32_t* kv_indptr;
  const int32_t* q_lens;
  int64_t contiguous_s;  // S of a contiguous kv
  float score_c;         // scale * kv_scale * log2(e)
};

// Pool (or contiguous) row of token j of request b.
inline int64_t KvRow(const MlaCtx& c, int64_t b, int64_t j) {
  if (!c.p->paged) return b * c.contiguous_s + j;
  const int64_t ps = c.p->page_size;
  const int64_t page = c.kv_indices[c.kv_indptr[b] + j / ps];
  return page * ps + j % ps;
}

struct Scratch {
  std::vector<float> q = std::vector<float>(kBq * kDk);
  std::vector<float> kt = std::vector<float>(kDk * kBk);
  std::vector<float> v = std::vector<float>(kBk * kDl);
  std::vector<float> s = std::vector<float>(kBq * kBk);
  std::vector<float> o = std::vector<float>(kBq * kDl);
  float m[kBq], l[kBq], alpha[kBq];
  int valid[kBq];
};

struct Partials {
  std::vector<float> o;     // [splits][rows][512], unnormalized
  std::vector<float> m, l;  // [splits][rows], m in base-2 units
};

// One split's key tiles [tile_lo, tile_hi) against query rows [r0, r0+64).
void SplitBlock(const MlaCtx& c, int64_t b, int64_t seq, int64_t qlen, int64_t tile_lo,
                int64_t tile_hi, int64_t r0, int64_t split, Scratch& sc, Partials& part) {
  const MlaDecodeParams& p = *c.p;
  const int64_t heads = p.heads, rows_total = p.q_len * heads;
  const int rows = static_cast<int>(std::min<int64_t>(kBq, rows_total - r0));
  const int rows4 = (rows + 3) & ~3;
  const int64_t qbase = b * rows_total;
  for (int i = 0; i < rows; ++i) {
    Bf16RowToFloatN<kDl>(c.q_lat + (qbase + r0 + i) * kDl, sc.q.data() + i * kDk);
    Bf16RowToFloatN<kMlaRopeDim>(c.q_pe + (qbase + r0 + i) * kMlaRopeDim, sc.q.data() + i * kDk + kDl);
  }
  std::fill(sc.q.begin() + rows * kDk, sc.q.begin() + rows4 * kDk, 0.0f);
  std::fill(sc.o.begin(), sc.o.begin() + rows4 * kDl, 0.0f);
  // Last visible key of row i; -1 for rows past the request's q_len.
  auto lim = [&](int i) -> int64_t {
    const int64_t t = (r0 + i) / heads;
    return t < qlen ? seq - qlen + t : -1;
  };
  int64_t max_lim = -1;
  for (int i = 0; i < rows; ++i) {
    max_lim = std::max(max_lim, lim(i));
    sc.m[i] = kNegInf;
    sc.l[i] = 0;
  }
  for (int i = rows; i < rows4; ++i) sc.m[i] = kNegInf, sc.l[i] = 0;
  for (int64_t tile = tile_lo; tile < tile_hi; ++tile) {
    const int64_t k0 = tile * kBk;
    if (k0 > max_lim) break;
    const int kcount = static_cast<int>(std::min<int64_t>({kBk, seq - k0, max_lim - k0 + 1}));
    bool v_bad = false;
    for (int jj = 0; jj < kcount; ++jj) {
      const uint8_t* row = c.kv + KvRow(c, b, k0 + jj) * kDk;
      float* vrow = sc.v.data() + jj * kDl;
      for (int d = 0; d < kDl; ++d) {
        const float x = c.table[row[d]];
        sc.kt[d * kBk + jj] = x;
        vrow[d] = x;
      }
      for (int d = kDl; d < kDk; ++d) sc.kt[d * kBk + jj] = c.table[row[d]];
      for (int d = 0; d < kDl; ++d) v_bad |= !std::isfinite(vrow[d]);
    }
    tiles::AttendKeyTile<kDk, kDl>(sc, rows, rows4, k0, kcount, v_bad, c.score_c, lim);
  }
  for (int i = 0; i < rows; ++i) {
    const int64_t idx = split * rows_total + r0 + i;
    part.m[idx] = sc.m[i];
    part.l[idx] = sc.l[i];
    std::copy(sc.o.begin() + i * kDl, sc.o.begin() + (i + 1) * kDl, part.o.begin() + idx * kDl);
  }
}

int64_t ChooseSplits(int64_t requested, int64_t tiles, int64_t row_blocks, int threads) {
  if (requested > 0) return requested;
  // Enough work items for every thread, but at least 4 tiles (256 keys) per split.
  int64_t s = (2 * static_cast<int64_t>(threads) + row_blocks - 1) / row_blocks;
  s = std::min({s, (tiles + 3) / 4, kMaxAutoSplits});
  return std::max<int64_t>(s, 1);
}

}  // namespace

absl::Status MlaDecode(const MlaDecodeParams& p, const MlaDecodeInputs& in, TensorView& out,
                       int threads) {
  if (out.desc.dtype != DType::kBf16 ||
      out.desc.num_elements() != p.batch * p.q_len * p.heads * kMlaLatentDim) {
    return absl::InvalidArgumentError(absl::StrCat("mla decode output must be ",
                                                   p.OutputDesc().DebugString(), ", got ",
                                                   out.desc.DebugString()));
  }
  if (in.kv.desc.dtype != DType::kFp8E4M3Fn && in.kv.desc.dtype != DType::kFp8E4M3Fnuz) {
    return absl::InvalidArgumentError(
        absl::StrCat("mla decode kv must be fp8_e4m3fn or fp8_e4m3fnuz, got ", DTypeName(in.kv.desc.dtype)));
  }
  if (p.paged && (in.seq_lens.empty() || in.kv_indices.empty() || in.kv_indptr.empty())) {
    return absl::InvalidArgumentError("paged mla decode needs seq_lens, kv_indices and kv_indptr");
  }
  MlaCtx c;
  c.p = &p;
  c.q_lat = in.q_lat.as<const uint16_t>();
  c.q_pe = in.q_pe.as<const uint16_t>();
  c.kv = in.kv.as<const uint8_t>();
  c.table = numerics::Fp8DecodeTable(in.kv.desc.dtype);
  c.seq_lens = in.seq_lens.empty() ? nullptr : in.seq_lens.as<const int32_t>();
  c.kv_indices = in.kv_indices.empty() ? nullptr : in.kv_indices.as<const int32_t>();
  c.kv_indptr = in.kv_indptr.empty() ? nullptr : in.kv_indptr.as<const int32_t>();
  c.q_lens = in.q_lens.empty() ? nullptr : in.q_lens.as<const int32_t>();
  c.contiguous_s = p.paged ? 0 : in.kv.desc.shape[1];
  c.score_c = static_cast<float>(p.scale * p.kv_scale * kLog2e);
  const float kv_scale = static_cast<float>(p.kv_scale);
  uint16_t* dst = out.as<uint16_t>();
  const int64_t rows_total = p.q_len * p.heads;
  const int64_t row_blocks = (rows_total + kBq - 1) / kBq;
  Partials part;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t seq = c.seq_lens != nullptr ? c.seq_lens[b] : c.contiguous_s;
    const int64_t qlen = c.q_lens != nullptr ? c.q_lens[b] : p.q_len;
    const int64_t tiles_n = (seq + kBk - 1) / kBk;
    const int64_t splits = ChooseSplits(p.num_splits, tiles_n, row_blocks, threads);
    part.o.resize(splits * rows_total * kDl);
    part.m.assign(splits * rows_total, kNegInf);
    part.l.assign(splits * rows_total, 0.0f);
#pragma omp parallel num_threads(threads)
    {
      Scratch sc;
#pragma omp for schedule(dynamic, 1)
      for (int64_t item = 0; item < splits * row_blocks; ++item) {
        const int64_t split = item / row_blocks, rb = item % row_blocks;
        // Balanced contiguous ranges of tiles; some are empty when splits > tiles.
        const int64_t lo = split * tiles_n / splits, hi = (split + 1) * tiles_n / splits;
        SplitBlock(c, b, seq, qlen, lo, hi, rb * kBq, split, sc, part);
      }
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows_total; ++r) {
        uint16_t* o = dst + (b * rows_total + r) * kDl;
        if (r / p.heads >= qlen) {
          for (int d = 0; d < kDl; ++d) o[d] = numerics::FloatToBf16(0.0f, p.rounding);
          continue;
        }
        // Fixed-order fp32 merge of the splits.
        float mmax = kNegInf;
        for (int64_t s = 0; s < splits; ++s) {
          const float m = part.m[s * rows_total + r];
          if (m > mmax) mmax = m;
        }
        const float m_use = mmax == kNegInf ? 0.0f : mmax;
        float acc[kDl] = {};
        float l = 0;
        for (int64_t s = 0; s < splits; ++s) {
          const int64_t idx = s * rows_total + r;
          if (part.m[idx] == kNegInf && part.l[idx] == 0) continue;  // split saw no key
          const float w = splits == 1 ? 1.0f : std::exp2(part.m[idx] - m_use);
          const float* po = part.o.data() + idx * kDl;
          for (int d = 0; d < kDl; ++d) acc[d] += w * po[d];
          l += w * part.l[idx];
        }
        for (int d = 0; d < kDl; ++d) o[d] = numerics::FloatToBf16(acc[d] / l * kv_scale, p.rounding);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace cpu
}  // namespace kernelserve
