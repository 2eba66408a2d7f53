#include "kernels/api/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kernelserve {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view expected, absl::string_view got) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": expected ", expected, ", got ", got));
}

absl::Status CheckDType(absl::string_view field, const TensorDesc& t, DType want) {
  if (t.dtype != want) return Invalid(field, DTypeName(want), DTypeName(t.dtype));
  return absl::OkStatus();
}

absl::Status CheckRank(absl::string_view field, const TensorDesc& t, int rank,
                       absl::string_view dims) {
  if (t.rank() != rank) {
    return Invalid(absl::StrCat(field, ".shape"), absl::StrCat("rank ", rank, " ", dims),
                   ShapeString(t.shape));
  }
  for (int i = 0; i < rank; ++i) {
    if (t.shape[i] <= 0) {
      return Invalid(absl::StrCat(field, ".shape[", i, "]"), "a positive dimension",
                     absl::StrCat(t.shape[i]));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckDim(absl::string_view field, const TensorDesc& t, int i, int64_t want,
                      absl::string_view what) {
  if (t.shape[i] != want) {
    return Invalid(absl::StrCat(field, ".shape[", i, "]"), absl::StrCat(want, " (", what, ")"),
                   absl::StrCat(t.shape[i]));
  }
  return absl::OkStatus();
}

absl::Status CheckScale(absl::string_view field, const std::optional<double>& s) {
  if (s.has_value() && !(std::isfinite(*s) && *s > 0)) {
    return Invalid(field, "a finite positive number", absl::StrCat(*s));
  }
  return absl::OkStatus();
}

// Element i of a host int32 tensor (checked by CheckIndexTensor).
int64_t IndexAt(const HostTensor& t, int64_t i) { return t.data<int32_t>()[i]; }

absl::Status CheckIndexTensor(absl::string_view field, const HostTensor& t, int64_t want_len) {
  // Kernels read index tensors as int32 (as the seeds' APIs do).
  if (t.dtype() != DType::kInt32) return Invalid(field, "int32", DTypeName(t.dtype()));
  if (t.shape().size() != 1) return Invalid(absl::StrCat(field, ".shape"), "rank 1", ShapeString(t.shape()));
  if (want_len >= 0 && t.shape()[0] != want_len) {
    return Invalid(absl::StrCat(field, ".shape[0]"), absl::StrCat(want_len), absl::StrCat(t.shape()[0]));
  }
  return absl::OkStatus();
}

// q_lens (optional, [B], each 1..q_len) against each request's own length:
// a request's new tokens are the last q_lens[b] of its own seq_lens[b]
// tokens, so each request needs at least its own window, not q_len.
absl::Status CheckQLens(int64_t batch, int64_t q_len, const std::vector<int64_t>& lens,
                        const HostTensor* q_lens) {
  if (q_lens == nullptr) {
    for (int64_t b = 0; b < batch; ++b) {
      if (lens[b] < q_len) {
        return Invalid(absl::StrCat("seq_lens[", b, "]"), absl::StrCat("at least q_len (", q_len, ")"),
                       absl::StrCat(lens[b]));
      }
    }
    return absl::OkStatus();
  }
  KS_RETURN_IF_ERROR(CheckIndexTensor("q_lens", *q_lens, batch));
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t ql = IndexAt(*q_lens, b);
    if (ql < 1 || ql > q_len) {
      return Invalid(absl::StrCat("q_lens[", b, "]"), absl::StrCat("1..", q_len, " (q_len)"), absl::StrCat(ql));
    }
    if (lens[b] < ql) {
      return Invalid(absl::StrCat("seq_lens[", b, "]"), absl::StrCat("at least q_lens[", b, "] (", ql, ")"),
                     absl::StrCat(lens[b]));
    }
  }
  return absl::OkStatus();
}

// A paged request's pages: kv_indptr [B+1] non-decreasing from 0 within
// kv_indices, enough pages for each seq_lens[b], and each of those pages in
// the pool.
absl::Status CheckPages(int64_t batch, const std::vector<int64_t>& lens, int64_t page_size,
                        int64_t num_slots, const HostTensor& kv_indptr, const HostTensor& kv_indices) {
  KS_RETURN_IF_ERROR(CheckIndexTensor("kv_indptr", kv_indptr, batch + 1));
  KS_RETURN_IF_ERROR(CheckIndexTensor("kv_indices", kv_indices, -1));
  const int64_t n_idx = kv_indices.shape()[0];
  const int64_t num_pages = num_slots / page_size;
  if (IndexAt(kv_indptr, 0) != 0) {
    return Invalid("kv_indptr[0]", "0", absl::StrCat(IndexAt(kv_indptr, 0)));
  }
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t lo = IndexAt(kv_indptr, b), hi = IndexAt(kv_indptr, b + 1);
    const int64_t need = (lens[b] + page_size - 1) / page_size;
    if (hi < lo || hi > n_idx) {
      return Invalid(absl::StrCat("kv_indptr[", b + 1, "]"),
                     absl::StrCat(lo, "..", n_idx, " (non-decreasing, within kv_indices)"),
                     absl::StrCat(hi));
    }
    if (hi - lo < need) {
      return Invalid(absl::StrCat("kv_indptr[", b + 1, "] - kv_indptr[", b, "]"),
                     absl::StrCat("at least ", need, page_size == 1 ? " slots" : " pages",
                                  " for seq_lens[", b, "]=", lens[b]),
                     absl::StrCat(hi - lo));
    }
    for (int64_t i = lo; i < lo + need; ++i) {
      const int64_t idx = IndexAt(kv_indices, i);
      if (idx < 0 || idx >= num_pages) {
        return Invalid(absl::StrCat("kv_indices[", i, "]"),
                       absl::StrCat(page_size == 1 ? "a slot in 0.." : "a page in 0..", num_pages - 1),
                       absl::StrCat(idx));
      }
    }
  }
  return absl::OkStatus();
}

// Shared by bf16 and FP8 attention: reads B, H, S, D from q/k/v in `layout`.
struct AttnDims {
  int64_t batch, heads_q, heads_kv, seq_q, seq_kv, d_qk, d_v;
};

absl::Status AttentionDims(Layout layout, const TensorDesc& q, const TensorDesc& k,
                           const TensorDesc& v, AttnDims* d) {
  const char* dims = layout == Layout::kBhsd ? "[B,H,S,D] (bhsd)" : "[B,S,H,D] (bshd)";
  KS_RETURN_IF_ERROR(CheckRank("q", q, 4, dims));
  KS_RETURN_IF_ERROR(CheckRank("k", k, 4, dims));
  KS_RETURN_IF_ERROR(CheckRank("v", v, 4, dims));
  const int h = layout == Layout::kBhsd ? 1 : 2;
  const int s = layout == Layout::kBhsd ? 2 : 1;
  d->batch = q.shape[0];
  d->heads_q = q.shape[h];
  d->seq_q = q.shape[s];
  d->d_qk = q.shape[3];
  d->heads_kv = k.shape[h];
  d->seq_kv = k.shape[s];
  d->d_v = v.shape[3];
  KS_RETURN_IF_ERROR(CheckDim("k", k, 0, d->batch, "q batch"));
  KS_RETURN_IF_ERROR(CheckDim("k", k, 3, d->d_qk, "q head_dim"));
  KS_RETURN_IF_ERROR(CheckDim("v", v, 0, d->batch, "q batch"));
  KS_RETURN_IF_ERROR(CheckDim("v", v, h, d->heads_kv, "k heads"));
  KS_RETURN_IF_ERROR(CheckDim("v", v, s, d->seq_kv, "k sequence length"));
  if (d->heads_q % d->heads_kv != 0) {
    return Invalid(absl::StrCat("k.shape[", h, "]"),
                   absl::StrCat("a divisor of q heads (", d->heads_q, ") for GQA"),
                   absl::StrCat(d->heads_kv));
  }
  return absl::OkStatus();
}

Shape AttentionShape(Layout layout, int64_t b, int64_t h, int64_t s, int64_t d) {
  return layout == Layout::kBhsd ? Shape{b, h, s, d} : Shape{b, s, h, d};
}

}  // namespace

std::string RoundingName(Rounding r) {
  switch (r) {
    case Rounding::kRtne: return "rtne";
    case Rounding::kRtna: return "rtna";
    case Rounding::kRtz: return "rtz";
  }
  return "invalid";
}

std::string LayoutName(Layout l) { return l == Layout::kBshd ? "bshd" : "bhsd"; }

std::string PModeName(PMode m) {
  switch (m) {
    case PMode::kExact: return "exact";
    case PMode::kLean: return "lean";
    case PMode::kNaive: return "naive";
  }
  return "invalid";
}

std::string Fp8FormatName(Fp8Format f) { return f == Fp8Format::kE4M3Fnuz ? "e4m3fnuz" : "e4m3fn"; }

DType Fp8FormatDType(Fp8Format f) {
  return f == Fp8Format::kE4M3Fnuz ? DType::kFp8E4M3Fnuz : DType::kFp8E4M3Fn;
}

// ------------------------------------------------------------------ attention

absl::Status AttentionParams::Validate(const TensorDesc& q, const TensorDesc& k,
                                       const TensorDesc& v) {
  KS_RETURN_IF_ERROR(CheckDType("q", q, DType::kBf16));
  KS_RETURN_IF_ERROR(CheckDType("k", k, DType::kBf16));
  KS_RETURN_IF_ERROR(CheckDType("v", v, DType::kBf16));
  AttnDims d;
  KS_RETURN_IF_ERROR(AttentionDims(layout, q, k, v, &d));
  if (d.d_v != d.d_qk) {
    return Invalid("v.shape[3]", absl::StrCat(d.d_qk, " (q head_dim)"), absl::StrCat(d.d_v));
  }
  if (d.d_qk > 256) return Invalid("q.shape[3]", "a head_dim of at most 256", absl::StrCat(d.d_qk));
  KS_RETURN_IF_ERROR(CheckScale("softmax_scale", softmax_scale));
  batch = d.batch;
  heads_q = d.heads_q;
  heads_kv = d.heads_kv;
  seq_q = d.seq_q;
  seq_kv = d.seq_kv;
  head_dim = d.d_qk;
  scale = softmax_scale.value_or(1.0 / std::sqrt(static_cast<double>(head_dim)));
  return absl::OkStatus();
}

TensorDesc AttentionParams::OutputDesc() const {
  return TensorDesc{DType::kBf16, AttentionShape(layout, batch, heads_q, seq_q, head_dim)};
}

// -------------------------------------------------------------- FP8 attention

absl::Status Fp8AttentionParams::Validate(const TensorDesc& q, const TensorDesc& k,
                                          const TensorDesc& v, const TensorDesc* q_descale,
                                          const TensorDesc* k_descale,
                                          const TensorDesc* v_descale) {
  const DType fp8 = Fp8FormatDType(format);
  fp8_inputs = q.dtype != DType::kBf16;
  const DType want = fp8_inputs ? fp8 : DType::kBf16;
  const std::string want_name =
      fp8_inputs ? absl::StrCat(DTypeName(fp8), " (format ", Fp8FormatName(format), ") or bf16")
                 : std::string("bf16");
  if (q.dtype != want) return Invalid("q", want_name, DTypeName(q.dtype));
  if (k.dtype != want) return Invalid("k", DTypeName(want) + " (like q)", DTypeName(k.dtype));
  if (v.dtype != want) return Invalid("v", DTypeName(want) + " (like q)", DTypeName(v.dtype));
  AttnDims d;
  KS_RETURN_IF_ERROR(AttentionDims(layout, q, k, v, &d));
  const bool shape_ok = (d.d_qk == 128 && d.d_v == 128) || (d.d_qk == 192 && d.d_v == 128);
  if (!shape_ok) {
    return Invalid("head shape (q.shape[3], v.shape[3])", "(128, 128) or (192, 128)",
                   absl::StrCat("(", d.d_qk, ", ", d.d_v, ")"));
  }
  KS_RETURN_IF_ERROR(CheckScale("softmax_scale", softmax_scale));
  if (fp8_inputs && hadamard) {
    return absl::InvalidArgumentError(
        "hadamard: applies only to bf16 inputs (the server rotates before quantizing); FP8 "
        "inputs must arrive already rotated");
  }
  const TensorDesc* descales[3] = {q_descale, k_descale, v_descale};
  const char* names[3] = {"q_descale", "k_descale", "v_descale"};
  const int64_t heads[3] = {d.heads_q, d.heads_kv, d.heads_kv};
  for (int i = 0; i < 3; ++i) {
    const TensorDesc* t = descales[i];
    if (!fp8_inputs) {
      if (t != nullptr) {
        return Invalid(names[i], "no descale for bf16 inputs (the server computes it)", "a tensor");
      }
      continue;
    }
    if (t == nullptr) return Invalid(names[i], "an fp32 tensor [1] or [B,H] for FP8 inputs", "none");
    KS_RETURN_IF_ERROR(CheckDType(names[i], *t, DType::kFp32));
    const bool per_tensor = t->rank() == 1 && t->shape[0] == 1;
    const bool per_head = t->rank() == 2 && t->shape[0] == d.batch && t->shape[1] == heads[i];
    if (!per_tensor && !per_head) {
      return Invalid(absl::StrCat(names[i], ".shape"),
                     absl::StrCat("[1] or [", d.batch, ",", heads[i], "]"), ShapeString(t->shape));
    }
  }
  batch = d.batch;
  heads_q = d.heads_q;
  heads_kv = d.heads_kv;
  seq_q = d.seq_q;
  seq_kv = d.seq_kv;
  d_qk = d.d_qk;
  d_v = d.d_v;
  scale = softmax_scale.value_or(1.0 / std::sqrt(static_cast<double>(d_qk)));
  return absl::OkStatus();
}

TensorDesc Fp8AttentionParams::OutputDesc() const {
  return TensorDesc{DType::kBf16, AttentionShape(layout, batch, heads_q, seq_q, d_v)};
}

// ----------------------------------------------------------------- MLA decode

absl::Status MlaDecodeParams::Validate(const TensorDesc& q_lat, const TensorDesc& q_pe,
                                       const TensorDesc& kv, bool is_paged, int64_t pool_page_size,
                                       const HostTensor* seq_lens, const HostTensor* kv_indices,
                                       const HostTensor* kv_indptr, const HostTensor* q_lens) {
  KS_RETURN_IF_ERROR(CheckDType("q_lat", q_lat, DType::kBf16));
  KS_RETURN_IF_ERROR(CheckDType("q_pe", q_pe, DType::kBf16));
  KS_RETURN_IF_ERROR(CheckRank("q_lat", q_lat, 4, "[B,q_len,H,512]"));
  KS_RETURN_IF_ERROR(CheckRank("q_pe", q_pe, 4, "[B,q_len,H,64]"));
  batch = q_lat.shape[0];
  q_len = q_lat.shape[1];
  heads = q_lat.shape[2];
  KS_RETURN_IF_ERROR(CheckDim("q_lat", q_lat, 3, kMlaLatentDim, "latent dim"));
  if (q_len > kMlaMaxQLen) {
    return Invalid("q_lat.shape[1]", absl::StrCat("q_len in 1..", kMlaMaxQLen), absl::StrCat(q_len));
  }
  if (heads > kMlaMaxHeads) {
    return Invalid("q_lat.shape[2]", absl::StrCat("at most ", kMlaMaxHeads, " heads"),
                   absl::StrCat(heads));
  }
  KS_RETURN_IF_ERROR(CheckDim("q_pe", q_pe, 0, batch, "q_lat batch"));
  KS_RETURN_IF_ERROR(CheckDim("q_pe", q_pe, 1, q_len, "q_lat q_len"));
  KS_RETURN_IF_ERROR(CheckDim("q_pe", q_pe, 2, heads, "q_lat heads"));
  KS_RETURN_IF_ERROR(CheckDim("q_pe", q_pe, 3, kMlaRopeDim, "rope dim"));
  if (kv.dtype != DType::kFp8E4M3Fn && kv.dtype != DType::kFp8E4M3Fnuz) {
    return Invalid("kv", "fp8_e4m3fn or fp8_e4m3fnuz", DTypeName(kv.dtype));
  }
  kv_dtype = kv.dtype;
  KS_RETURN_IF_ERROR(CheckScale("softmax_scale", softmax_scale));
  if (!(std::isfinite(kv_scale) && kv_scale > 0)) {
    return Invalid("kv_scale", "a finite positive number", absl::StrCat(kv_scale));
  }
  if (num_splits < 0 || num_splits > 1024) {
    return Invalid("num_splits", "0 (auto) or 1..1024", absl::StrCat(num_splits));
  }
  paged = is_paged;
  has_seq_lens = seq_lens != nullptr;
  has_q_lens = q_lens != nullptr;
  int64_t capacity;  // most tokens a request may have
  if (!paged) {
    KS_RETURN_IF_ERROR(CheckRank("kv", kv, 3, "[B,S,576]"));
    KS_RETURN_IF_ERROR(CheckDim("kv", kv, 0, batch, "q_lat batch"));
    KS_RETURN_IF_ERROR(CheckDim("kv", kv, 2, kMlaRowDim, "fused latent+rope row"));
    if (kv_indices != nullptr || kv_indptr != nullptr) {
      return absl::InvalidArgumentError(
          "kv_indices/kv_indptr: only allowed with a pool (pool_id), not with a contiguous kv");
    }
    capacity = kv.shape[1];
    page_size = 1;
    num_slots = 0;
  } else {
    KS_RETURN_IF_ERROR(CheckRank("kv", kv, 2, "[num_slots,576] (pool)"));
    KS_RETURN_IF_ERROR(CheckDim("kv", kv, 1, kMlaRowDim, "fused latent+rope row"));
    if (pool_page_size <= 0) return Invalid("page_size", "a positive page size", absl::StrCat(pool_page_size));
    page_size = pool_page_size;
    num_slots = kv.shape[0];
    if (seq_lens == nullptr) return Invalid("seq_lens", "an int32 [B] tensor with a pool", "none");
    if (kv_indices == nullptr) return Invalid("kv_indices", "an int32 tensor with a pool", "none");
    if (kv_indptr == nullptr) return Invalid("kv_indptr", "an int32 [B+1] tensor with a pool", "none");
    capacity = std::numeric_limits<int64_t>::max();
  }
  max_seq = 0;
  std::vector<int64_t> lens(batch, paged ? 0 : capacity);
  if (seq_lens != nullptr) {
    KS_RETURN_IF_ERROR(CheckIndexTensor("seq_lens", *seq_lens, batch));
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t s = IndexAt(*seq_lens, b);
      if (s < 1 || s > capacity) {
        return Invalid(absl::StrCat("seq_lens[", b, "]"),
                       paged ? std::string("at least 1") : absl::StrCat("1..", capacity, " (kv S)"),
                       absl::StrCat(s));
      }
      lens[b] = s;
    }
  }
  for (int64_t s : lens) max_seq = std::max(max_seq, s);
  KS_RETURN_IF_ERROR(CheckQLens(batch, q_len, lens, q_lens));
  if (paged) KS_RETURN_IF_ERROR(CheckPages(batch, lens, page_size, num_slots, *kv_indptr, *kv_indices));
  scale = softmax_scale.value_or(1.0 / std::sqrt(static_cast<double>(kMlaRowDim)));
  return absl::OkStatus();
}

TensorDesc MlaDecodeParams::OutputDesc() const {
  return TensorDesc{DType::kBf16, {batch, q_len, heads, kMlaLatentDim}};
}

// ----------------------------------------------------------- decode attention

absl::Status DecodeAttentionParams::Validate(const TensorDesc& q, const TensorDesc& kv,
                                             int64_t pool_heads, int64_t pool_head_dim,
                                             int64_t pool_page_size, const HostTensor* seq_lens,
                                             const HostTensor* kv_indices, const HostTensor* kv_indptr,
                                             const HostTensor* q_lens) {
  KS_RETURN_IF_ERROR(CheckDType("q", q, DType::kBf16));
  KS_RETURN_IF_ERROR(CheckRank("q", q, 4, "[B,q_len,Hq,D]"));
  batch = q.shape[0];
  q_len = q.shape[1];
  heads_q = q.shape[2];
  head_dim = q.shape[3];
  if (q_len > kDecodeMaxQLen) {
    return Invalid("q.shape[1]", absl::StrCat("q_len in 1..", kDecodeMaxQLen), absl::StrCat(q_len));
  }
  if (pool_heads <= 0 || pool_head_dim <= 0) {
    return Invalid("pool_id", "a PER_HEAD_KV pool (num_heads and head_dim > 0)",
                   absl::StrCat("num_heads ", pool_heads, ", head_dim ", pool_head_dim));
  }
  if (head_dim != pool_head_dim) {
    return Invalid("q.shape[3]", absl::StrCat(pool_head_dim, " (the pool's head_dim)"), absl::StrCat(head_dim));
  }
  if (head_dim != 64 && head_dim != 128 && head_dim != 256) {
    return Invalid("q.shape[3]", "a head_dim of 64, 128 or 256", absl::StrCat(head_dim));
  }
  heads_kv = pool_heads;
  if (heads_q % heads_kv != 0) {
    return Invalid("q.shape[2]", absl::StrCat("a multiple of the pool's num_heads (", heads_kv, ") for GQA"),
                   absl::StrCat(heads_q));
  }
  if (kv.dtype != DType::kBf16 && !IsFp8(kv.dtype)) {
    return Invalid("pool_id", "a pool of bf16 or fp8 rows", DTypeName(kv.dtype));
  }
  kv_dtype = kv.dtype;
  KS_RETURN_IF_ERROR(CheckRank("kv", kv, 2, "[num_slots,2*num_heads*head_dim] (pool)"));
  KS_RETURN_IF_ERROR(CheckDim("kv", kv, 1, 2 * heads_kv * head_dim, "K and V of every head"));
  KS_RETURN_IF_ERROR(CheckScale("softmax_scale", softmax_scale));
  if (!(std::isfinite(kv_scale) && kv_scale > 0)) {
    return Invalid("kv_scale", "a finite positive number", absl::StrCat(kv_scale));
  }
  if (pool_page_size <= 0) return Invalid("page_size", "a positive page size", absl::StrCat(pool_page_size));
  page_size = pool_page_size;
  num_slots = kv.shape[0];
  if (seq_lens == nullptr) return Invalid("seq_lens", "an int32 [B] tensor", "none");
  if (kv_indices == nullptr) return Invalid("kv_indices", "an int32 tensor", "none");
  if (kv_indptr == nullptr) return Invalid("kv_indptr", "an int32 [B+1] tensor", "none");
  KS_RETURN_IF_ERROR(CheckIndexTensor("seq_lens", *seq_lens, batch));
  std::vector<int64_t> lens(batch);
  max_seq = 0;
  for (int64_t b = 0; b < batch; ++b) {
    lens[b] = IndexAt(*seq_lens, b);
    if (lens[b] < 1) return Invalid(absl::StrCat("seq_lens[", b, "]"), "at least 1", absl::StrCat(lens[b]));
    max_seq = std::max(max_seq, lens[b]);
  }
  has_q_lens = q_lens != nullptr;
  KS_RETURN_IF_ERROR(CheckQLens(batch, q_len, lens, q_lens));
  KS_RETURN_IF_ERROR(CheckPages(batch, lens, page_size, num_slots, *kv_indptr, *kv_indices));
  scale = softmax_scale.value_or(1.0 / std::sqrt(static_cast<double>(head_dim)));
  return absl::OkStatus();
}

TensorDesc DecodeAttentionParams::OutputDesc() const {
  return TensorDesc{DType::kBf16, {batch, q_len, heads_q, head_dim}};
}

// ----------------------------------------------------------------------- MoE

absl::Status MoeParams::Validate(const TensorDesc& x, const HostTensor& topk_ids,
                                 const TensorDesc* topk_weights, const TensorDesc* w13,
                                 const TensorDesc* w13_scales, const TensorDesc* w2,
                                 const TensorDesc* w2_scales) {
  if (stage != MoeStage::kGateUp && stage != MoeStage::kDown && stage != MoeStage::kLayer) {
    return Invalid("stage", "gateup, down or layer", absl::StrCat(static_cast<int>(stage)));
  }
  if (topk_ids.dtype() != DType::kInt32) return Invalid("topk_ids", "int32", DTypeName(topk_ids.dtype()));
  KS_RETURN_IF_ERROR(CheckRank("topk_ids", topk_ids.desc(), 2, "[T,top_k]"));
  tokens = topk_ids.shape()[0];
  top_k = topk_ids.shape()[1];
  KS_RETURN_IF_ERROR(CheckDType("x", x, DType::kBf16));
  const bool need_w13 = stage != MoeStage::kDown;
  const bool need_w2 = stage != MoeStage::kGateUp;
  const bool need_weights = stage == MoeStage::kLayer || (stage == MoeStage::kDown && weighted_sum);
  experts = 0;
  auto check_weight = [&](const char* wname, const char* sname, const TensorDesc* w,
                          const TensorDesc* s, int64_t rows_want, int64_t k_want,
                          const char* rows_what, const char* k_what) -> absl::Status {
    if (w == nullptr) return Invalid(wname, "an fp4_e2m1 tensor for this stage", "none");
    if (s == nullptr) return Invalid(sname, "an e8m0 tensor for this stage", "none");
    KS_RETURN_IF_ERROR(CheckDType(wname, *w, DType::kFp4E2M1));
    KS_RETURN_IF_ERROR(CheckDType(sname, *s, DType::kE8M0));
    KS_RETURN_IF_ERROR(CheckRank(wname, *w, 3, "[E,rows,K]"));
    KS_RETURN_IF_ERROR(CheckRank(sname, *s, 3, "[E,rows,K/32]"));
    if (experts == 0) experts = w->shape[0];
    KS_RETURN_IF_ERROR(CheckDim(wname, *w, 0, experts, "experts"));
    if (rows_want >= 0) KS_RETURN_IF_ERROR(CheckDim(wname, *w, 1, rows_want, rows_what));
    if (k_want >= 0) KS_RETURN_IF_ERROR(CheckDim(wname, *w, 2, k_want, k_what));
    if (w->shape[2] % 32 != 0) {
      return Invalid(absl::StrCat(wname, ".shape[2]"), "a multiple of 32 (MXFP4 scale blocks)",
                     absl::StrCat(w->shape[2]));
    }
    KS_RETURN_IF_ERROR(CheckDim(sname, *s, 0, experts, "experts"));
    KS_RETURN_IF_ERROR(CheckDim(sname, *s, 1, w->shape[1], absl::StrCat(wname, " rows").c_str()));
    KS_RETURN_IF_ERROR(CheckDim(sname, *s, 2, w->shape[2] / 32, absl::StrCat(wname, " K/32").c_str()));
    return absl::OkStatus();
  };
  KS_RETURN_IF_ERROR(CheckRank("x", x, 2, stage == MoeStage::kDown ? "[T*top_k,I]" : "[T,K]"));
  if (need_w13) {
    KS_RETURN_IF_ERROR(CheckDim("x", x, 0, tokens, "topk_ids tokens"));
    hidden = x.shape[1];
    if (w13 == nullptr) return Invalid("w13", "an fp4_e2m1 tensor for this stage", "none");
    if (w13->rank() == 3 && w13->shape[1] % 2 != 0) {
      return Invalid("w13.shape[1]", "an even row count 2I (gate rows then up rows)",
                     absl::StrCat(w13->shape[1]));
    }
    KS_RETURN_IF_ERROR(check_weight("w13", "w13_scales", w13, w13_scales, -1, hidden, "", "x K"));
    inter = w13->shape[1] / 2;
  }
  if (need_w2) {
    if (stage == MoeStage::kDown) {
      KS_RETURN_IF_ERROR(CheckDim("x", x, 0, tokens * top_k, "T*top_k pairs"));
      inter = x.shape[1];
    }
    KS_RETURN_IF_ERROR(check_weight("w2", "w2_scales", w2, w2_scales, need_w13 ? hidden : -1, inter,
                                    "N = K of gate/up", "I"));
    out_dim = w2->shape[1];
  }
  if (need_weights) {
    if (topk_weights == nullptr) return Invalid("topk_weights", "an fp32 [T,top_k] tensor", "none");
    KS_RETURN_IF_ERROR(CheckDType("topk_weights", *topk_weights, DType::kFp32));
    KS_RETURN_IF_ERROR(CheckRank("topk_weights", *topk_weights, 2, "[T,top_k]"));
    KS_RETURN_IF_ERROR(CheckDim("topk_weights", *topk_weights, 0, tokens, "topk_ids tokens"));
    KS_RETURN_IF_ERROR(CheckDim("topk_weights", *topk_weights, 1, top_k, "topk_ids top_k"));
  }
  const int32_t* ids = topk_ids.data<int32_t>();
  for (int64_t i = 0; i < tokens * top_k; ++i) {
    if (ids[i] < 0 || ids[i] >= experts) {
      return Invalid(absl::StrCat("topk_ids[", i / top_k, ",", i % top_k, "]"),
                     absl::StrCat("an expert in 0..", experts - 1), absl::StrCat(ids[i]));
    }
  }
  return absl::OkStatus();
}

TensorDesc MoeParams::OutputDesc() const {
  switch (stage) {
    case MoeStage::kGateUp:
      return TensorDesc{DType::kBf16, {tokens * top_k, swiglu ? inter : 2 * inter}};
    case MoeStage::kDown:
      return TensorDesc{DType::kBf16, {weighted_sum ? tokens : tokens * top_k, out_dim}};
    case MoeStage::kLayer:
      return TensorDesc{DType::kBf16, {tokens, out_dim}};
  }
  return TensorDesc{};
}

}  // namespace kernelserve
