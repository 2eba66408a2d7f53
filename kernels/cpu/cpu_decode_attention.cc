// Decode attention over a PER_HEAD_KV pool on the cpu (DESIGN §4; numerics in
// kernels/api/ops.h, DecodeAttentionParams). One work item is one request b,
// one KV head and a block of up to 64 query rows of that KV head: row
// r = t * group + g is new token t of query head hkv * group + g, so the
// group's heads share each 64-key tile of K and V, converted to fp32 once per
// item straight from the pool rows (bf16 or fp8, no copy of the pool). Scores
// and P.V are the attention tile kernels; softmax is the online base-2 one in
// fp32 with kv_scale folded into the score scale and the final division.
// Items run under OpenMP; each writes only its own output rows and visits
// keys in order, so results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/api/ops.h"
#include "kernels/cpu/cpu_attention_tiles.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_simd.h"
#include "kernels/numerics/numerics.h"

namespace kernelserve {
namespace cpu {
namespace {

using tiles::kBk;
using tiles::kBq;
using tiles::kLog2e;
using tiles::kNegInf;

struct DecodeCtx {
  const DecodeAttentionParams* p;
  const uint16_t* q;
  const uint8_t* pool;     // the pool rows, in place
  int64_t row_bytes;       // bytes of one pool row
  const float* fp8_table;  // nullptr for a bf16 pool
  const int32_t* seq_lens;
  const int32_t* kv_indices;
  const int32_t* kv_indptr;
  const int32_t* q_lens;
  float score_c;  // scale * kv_scale * log2(e)
};

// One work item: request b, KV head hkv, query rows [r0, r0 + 64) of that head's group.
struct Item {
  int64_t b, hkv, r0;
};

template <int D>
struct Scratch {
  std::vector<float> q = std::vector<float>(kBq * D);
  std::vector<float> kt = std::vector<float>(D * kBk);
  std::vector<float> v = std::vector<float>(kBk * D);
  std::vector<float> s = std::vector<float>(kBq * kBk);
  std::vector<float> o = std::vector<float>(kBq * D);
  float m[kBq], l[kBq], alpha[kBq];
  int valid[kBq];
};

// Pool slot of token j of request b.
inline int64_t Slot(const DecodeCtx& c, int64_t b, int64_t j) {
  const int64_t ps = c.p->page_size;
  return static_cast<int64_t>(c.kv_indices[c.kv_indptr[b] + j / ps]) * ps + j % ps;
}

// K of token jj's row into column jj of kt ([D][kBk]) and V into row jj of v;
// returns true when V holds a non-finite value.
template <int D>
bool LoadKv(const DecodeCtx& c, int64_t slot, int64_t hkv, int jj, float* kt, float* v) {
  const DecodeAttentionParams& p = *c.p;
  const uint8_t* row = c.pool + slot * c.row_bytes;
  float* vrow = v + jj * D;
  if (c.fp8_table == nullptr) {
    const uint16_t* k16 = reinterpret_cast<const uint16_t*>(row) + p.RowOffset(false, hkv);
    for (int d = 0; d < D; ++d) kt[d * kBk + jj] = Bf16Bits(k16[d]);
    Bf16RowToFloatN<D>(reinterpret_cast<const uint16_t*>(row) + p.RowOffset(true, hkv), vrow);
  } else {
    const uint8_t* k8 = row + p.RowOffset(false, hkv);
    const uint8_t* v8 = row + p.RowOffset(true, hkv);
    for (int d = 0; d < D; ++d) kt[d * kBk + jj] = c.fp8_table[k8[d]];
    for (int d = 0; d < D; ++d) vrow[d] = c.fp8_table[v8[d]];
  }
  bool bad = false;
  for (int d = 0; d < D; ++d) bad |= !std::isfinite(vrow[d]);
  return bad;
}

template <int D>
void RunItem(const DecodeCtx& c, const Item& it, Scratch<D>& sc, uint16_t* out) {
  const DecodeAttentionParams& p = *c.p;
  const int64_t group = p.heads_q / p.heads_kv;
  const int64_t seq = c.seq_lens[it.b];
  const int64_t qlen = c.q_lens != nullptr ? c.q_lens[it.b] : p.q_len;
  const int rows = static_cast<int>(std::min<int64_t>(kBq, qlen * group - it.r0));
  const int rows4 = (rows + 3) & ~3;
  // Element offset of row i's query (and output) vector.
  auto qoff = [&](int i) {
    const int64_t r = it.r0 + i, t = r / group, h = it.hkv * group + r % group;
    return ((it.b * p.q_len + t) * p.heads_q + h) * D;
  };
  // Last key row i sees (bottom-right aligned causal window).
  auto lim = [&](int i) { return seq - qlen + (it.r0 + i) / group; };
  int64_t max_lim = 0;
  for (int i = 0; i < rows; ++i) {
    Bf16RowToFloatN<D>(c.q + qoff(i), sc.q.data() + i * D);
    max_lim = std::max(max_lim, lim(i));
  }
  std::fill(sc.q.begin() + rows * D, sc.q.begin() + rows4 * D, 0.0f);
  std::fill(sc.o.begin(), sc.o.begin() + rows4 * D, 0.0f);
  std::fill(sc.m, sc.m + rows4, kNegInf);
  std::fill(sc.l, sc.l + rows4, 0.0f);
  for (int64_t k0 = 0; k0 <= max_lim; k0 += kBk) {
    const int kcount = static_cast<int>(std::min<int64_t>(kBk, max_lim - k0 + 1));
    bool v_bad = false;
    for (int jj = 0; jj < kcount; ++jj) {
      v_bad |= LoadKv<D>(c, Slot(c, it.b, k0 + jj), it.hkv, jj, sc.kt.data(), sc.v.data());
    }
    tiles::AttendKeyTile<D, D>(sc, rows, rows4, k0, kcount, v_bad, c.score_c, lim);
  }
  const float kv_scale = static_cast<float>(p.kv_scale);
  for (int i = 0; i < rows; ++i) {
    uint16_t* o = out + qoff(i);
    const float* acc = sc.o.data() + i * D;
    for (int d = 0; d < D; ++d) o[d] = numerics::FloatToBf16(acc[d] / sc.l[i] * kv_scale, p.rounding);
  }
}

template <int D>
void Run(const DecodeCtx& c, const std::vector<Item>& items, uint16_t* out, int threads) {
#pragma omp parallel num_threads(threads)
  {
    Scratch<D> sc;
#pragma omp for schedule(dynamic, 1)
    for (size_t i = 0; i < items.size(); ++i) RunItem<D>(c, items[i], sc, out);
  }
}

}  // namespace

absl::Status DecodeAttention(const DecodeAttentionParams& p, const DecodeAttentionInputs& in,
                             TensorView& out, int threads) {
  const TensorDesc want = p.OutputDesc();
  if (out.desc.dtype != DType::kBf16 || out.desc.num_elements() != want.num_elements()) {
    return absl::InvalidArgumentError(absl::StrCat("decode attention output must be ", want.DebugString(),
                                                   ", got ", out.desc.DebugString()));
  }
  if (in.kv.desc.dtype != p.kv_dtype || in.seq_lens.empty() || in.kv_indices.empty() || in.kv_indptr.empty()) {
    return absl::InvalidArgumentError(
        "decode attention needs the validated pool, seq_lens, kv_indices and kv_indptr");
  }
  DecodeCtx c;
  c.p = &p;
  c.q = in.q.as<const uint16_t>();
  c.pool = in.kv.as<const uint8_t>();
  c.row_bytes = NumBytes(p.kv_dtype, 2 * p.heads_kv * p.head_dim);
  c.fp8_table = p.kv_dtype == DType::kBf16 ? nullptr : numerics::Fp8DecodeTable(p.kv_dtype);
  c.seq_lens = in.seq_lens.as<const int32_t>();
  c.kv_indices = in.kv_indices.as<const int32_t>();
  c.kv_indptr = in.kv_indptr.as<const int32_t>();
  c.q_lens = in.q_lens.empty() ? nullptr : in.q_lens.as<const int32_t>();
  c.score_c = static_cast<float>(p.scale * p.kv_scale * kLog2e);
  uint16_t* dst = out.as<uint16_t>();
  const int64_t group = p.heads_q / p.heads_kv;
  std::vector<Item> items;
  const uint16_t zero = numerics::FloatToBf16(0.0f, p.rounding);
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t qlen = c.q_lens != nullptr ? c.q_lens[b] : p.q_len;
    for (int64_t hkv = 0; hkv < p.heads_kv; ++hkv) {
      for (int64_t r0 = 0; r0 < qlen * group; r0 += kBq) items.push_back(Item{b, hkv, r0});
    }
    // Rows past the request's window are zeros.
    const int64_t row = p.heads_q * p.head_dim;
    std::fill(dst + (b * p.q_len + qlen) * row, dst + (b + 1) * p.q_len * row, zero);
  }
  switch (p.head_dim) {
    case 64: Run<64>(c, items, dst, threads); break;
    case 128: Run<128>(c, items, dst, threads); break;
    case 256: Run<256>(c, items, dst, threads); break;
    default:
      return absl::UnimplementedError(
          absl::StrCat("decode attention on cpu: head_dim ", p.head_dim, " (64, 128 and 256 exist)"));
  }
  return absl::OkStatus();
}

}  // namespace cpu
}  // namespace kernelserve
