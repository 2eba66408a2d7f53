// The fp64 oracle behind kernels/api/variants.h, so that the server (which
// sees only kernels/api) can gate and time against it.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/api/variants.h"
#include "kernels/cpu/oracle.h"
#include "kernels/numerics/numerics.h"

namespace kernelserve {
namespace {

HostTensor Copy(const TensorView& v) {
  const auto* p = static_cast<const uint8_t*>(v.data);
  return HostTensor(v.desc, std::vector<uint8_t>(p, p + v.desc.num_bytes()));
}

absl::StatusOr<std::vector<double>> Compute(const OpCall& c, bool reference) {
  switch (c.op) {
    case BenchOp::kAttention:
      return oracle::Attention(c.attention, Copy(c.q), Copy(c.k), Copy(c.v));
    case BenchOp::kFp8Attention: {
      KS_ASSIGN_OR_RETURN(oracle::QuantizedAttentionInputs qin,
                          oracle::QuantizeAttentionInputs(c.fp8, c.fp8_in));
      return oracle::Fp8Attention(c.fp8, qin,
                                  reference ? oracle::PQuant::kNone : oracle::PQuant::kAsParams);
    }
    case BenchOp::kMlaDecode:
      return oracle::MlaDecode(c.mla, c.mla_in);
    case BenchOp::kMoeGateUp:
    case BenchOp::kMoeDown:
    case BenchOp::kMoeLayer:
      return oracle::Moe(c.moe, c.moe_in);
  }
  return absl::InvalidArgumentError("unknown op");
}

Rounding CallRounding(const OpCall& c) {
  switch (c.op) {
    case BenchOp::kAttention:
      return c.attention.rounding;
    case BenchOp::kFp8Attention:
      return c.fp8.rounding;
    case BenchOp::kMlaDecode:
      return c.mla.rounding;
    default:
      return c.moe.rounding;
  }
}

int64_t Off(Layout l, int64_t b, int64_t h, int64_t s, int64_t heads, int64_t seq, int64_t d) {
  return l == Layout::kBhsd ? ((b * heads + h) * seq + s) * d : ((b * seq + s) * heads + h) * d;
}

// Copies rows [s0, s0 + n) of head (b, h) of a [B,H,S,D] tensor (layout l)
// to `dst`, n rows of dim elements.
void CopyRows(const TensorView& src, Layout l, int64_t b, int64_t h, int64_t heads, int64_t seq,
              int64_t dim, int64_t s0, int64_t n, uint8_t* dst) {
  const int64_t eb = DTypeBits(src.desc.dtype) / 8;
  const auto* base = static_cast<const uint8_t*>(src.data);
  for (int64_t s = 0; s < n; ++s) {
    std::memcpy(dst + s * dim * eb, base + Off(l, b, h, s0 + s, heads, seq, dim) * eb,
                static_cast<size_t>(dim * eb));
  }
}

absl::StatusOr<OracleSample> SampleAttention(const OpCall& c, double max_flops) {
  const bool fp8 = c.op == BenchOp::kFp8Attention;
  const Layout l = fp8 ? c.fp8.layout : c.attention.layout;
  const int64_t B = fp8 ? c.fp8.batch : c.attention.batch;
  const int64_t Hq = fp8 ? c.fp8.heads_q : c.attention.heads_q;
  const int64_t Hkv = fp8 ? c.fp8.heads_kv : c.attention.heads_kv;
  const int64_t Sq = fp8 ? c.fp8.seq_q : c.attention.seq_q;
  const int64_t Skv = fp8 ? c.fp8.seq_kv : c.attention.seq_kv;
  const int64_t Dqk = fp8 ? c.fp8.d_qk : c.attention.head_dim;
  const int64_t Dv = fp8 ? c.fp8.d_v : c.attention.head_dim;
  const int64_t pairs = B * Hq;
  const int64_t P = std::min<int64_t>(pairs, 4);
  const double per_row = 2.0 * static_cast<double>(Dqk + Dv) * static_cast<double>(Skv);
  const int64_t R = std::clamp<int64_t>(static_cast<int64_t>(max_flops / (static_cast<double>(P) * per_row)),
                                        std::min<int64_t>(16, Sq), Sq);
  std::vector<std::pair<int64_t, int64_t>> picks;  // (b, h), spread over all pairs
  for (int64_t p = 0; p < P; ++p) {
    const int64_t flat = p * pairs / P + (pairs / P) / 2;
    picks.emplace_back(flat / Hq, flat % Hq);
  }
  const int64_t group = Hq / Hkv;
  OracleSample out;
  std::vector<double> ref;
  if (!fp8) {
    HostTensor q(DType::kBf16, {1, P, R, Dqk}), k(DType::kBf16, {1, P, Skv, Dqk}), v(DType::kBf16, {1, P, Skv, Dv});
    for (int64_t p = 0; p < P; ++p) {
      const auto [b, h] = picks[p];
      CopyRows(c.q, l, b, h, Hq, Sq, Dqk, Sq - R, R, q.bytes() + p * R * Dqk * 2);
      CopyRows(c.k, l, b, h / group, Hkv, Skv, Dqk, 0, Skv, k.bytes() + p * Skv * Dqk * 2);
      CopyRows(c.v, l, b, h / group, Hkv, Skv, Dv, 0, Skv, v.bytes() + p * Skv * Dv * 2);
    }
    AttentionParams sp = c.attention;
    sp.layout = Layout::kBhsd;
    KS_ASSIGN_OR_RETURN(ref, oracle::Attention(sp, q, k, v));
  } else {
    // Quantize the whole tensors first: descales depend on all of them.
    KS_ASSIGN_OR_RETURN(oracle::QuantizedAttentionInputs full, oracle::QuantizeAttentionInputs(c.fp8, c.fp8_in));
    const DType dt = full.q.dtype();
    oracle::QuantizedAttentionInputs sub;
    sub.q = HostTensor(dt, {1, P, R, Dqk});
    sub.k = HostTensor(dt, {1, P, Skv, Dqk});
    sub.v = HostTensor(dt, {1, P, Skv, Dv});
    for (int64_t p = 0; p < P; ++p) {
      const auto [b, h] = picks[p];
      const int64_t hk = h / group;
      CopyRows(full.q.view(), l, b, h, Hq, Sq, Dqk, Sq - R, R, sub.q.bytes() + p * R * Dqk);
      CopyRows(full.k.view(), l, b, hk, Hkv, Skv, Dqk, 0, Skv, sub.k.bytes() + p * Skv * Dqk);
      CopyRows(full.v.view(), l, b, hk, Hkv, Skv, Dv, 0, Skv, sub.v.bytes() + p * Skv * Dv);
      sub.q_descale.push_back(full.q_descale[b * Hq + h]);
      sub.k_descale.push_back(full.k_descale[b * Hkv + hk]);
      sub.v_descale.push_back(full.v_descale[b * Hkv + hk]);
    }
    Fp8AttentionParams sp = c.fp8;
    sp.layout = Layout::kBhsd;
    sp.batch = 1;
    sp.heads_q = sp.heads_kv = P;
    sp.seq_q = R;
    KS_ASSIGN_OR_RETURN(ref, oracle::Fp8Attention(sp, sub, oracle::PQuant::kNone));
  }
  for (int64_t p = 0; p < P; ++p) {
    const auto [b, h] = picks[p];
    for (int64_t r = 0; r < R; ++r) {
      const int64_t o = Off(l, b, h, Sq - R + r, Hq, Sq, Dv);
      for (int64_t d = 0; d < Dv; ++d) out.index.push_back(o + d);
    }
  }
  out.reference = std::move(ref);
  out.desc = absl::StrCat("the last ", R, " of ", Sq, " query rows of ", P, " of ", pairs, " (batch, head) pairs");
  return out;
}

absl::StatusOr<OracleSample> SampleMla(const OpCall& c, double max_flops) {
  const MlaDecodeParams& m = c.mla;
  const int64_t B = m.batch, Q = m.q_len, H = m.heads, S = m.max_seq;
  const int64_t L = kMlaLatentDim, R = kMlaRopeDim;
  const int64_t n = std::min<int64_t>(B, 2);
  const double per = 2.0 * static_cast<double>(kMlaRowDim + kMlaLatentDim) * static_cast<double>(S * Q);
  const int64_t hs = std::clamp<int64_t>(static_cast<int64_t>(max_flops / (static_cast<double>(n) * per)), 1, H);
  HostTensor ql(DType::kBf16, {n, Q, hs, L}), qp(DType::kBf16, {n, Q, hs, R});
  const auto* fl = static_cast<const uint8_t*>(c.mla_in.q_lat.data);
  const auto* fp = static_cast<const uint8_t*>(c.mla_in.q_pe.data);
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t t = 0; t < Q; ++t) {
      for (int64_t h = 0; h < hs; ++h) {
        std::memcpy(ql.bytes() + ((b * Q + t) * hs + h) * L * 2, fl + ((b * Q + t) * H + h) * L * 2, L * 2);
        std::memcpy(qp.bytes() + ((b * Q + t) * hs + h) * R * 2, fp + ((b * Q + t) * H + h) * R * 2, R * 2);
      }
    }
  }
  MlaDecodeParams sp = m;
  sp.batch = n;
  sp.heads = hs;
  MlaDecodeInputs in;
  in.q_lat = ql.view();
  in.q_pe = qp.view();
  if (m.paged) {
    // The first n requests' page table rows; the pool stays whole.
    in.kv = c.mla_in.kv;
    in.kv_indices = c.mla_in.kv_indices;
    in.kv_indptr = TensorView{TensorDesc{DType::kInt32, {n + 1}}, c.mla_in.kv_indptr.data};
    in.seq_lens = TensorView{TensorDesc{DType::kInt32, {n}}, c.mla_in.seq_lens.data};
  } else {
    in.kv = TensorView{TensorDesc{c.mla_in.kv.desc.dtype, {n, S, kMlaRowDim}}, c.mla_in.kv.data};
    if (!c.mla_in.seq_lens.empty()) {
      in.seq_lens = TensorView{TensorDesc{DType::kInt32, {n}}, c.mla_in.seq_lens.data};
    }
  }
  if (!c.mla_in.q_lens.empty()) in.q_lens = TensorView{TensorDesc{DType::kInt32, {n}}, c.mla_in.q_lens.data};
  OracleSample out;
  KS_ASSIGN_OR_RETURN(out.reference, oracle::MlaDecode(sp, in));
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t t = 0; t < Q; ++t) {
      for (int64_t h = 0; h < hs; ++h) {
        for (int64_t d = 0; d < L; ++d) out.index.push_back(((b * Q + t) * H + h) * L + d);
      }
    }
  }
  out.desc = absl::StrCat(hs, " of ", H, " heads of the first ", n, " of ", B, " requests");
  return out;
}

absl::StatusOr<OracleSample> SampleMoe(const OpCall& c, double max_flops) {
  const MoeParams& m = c.moe;
  double per_token = 0;
  if (m.stage != MoeStage::kDown) per_token += 4.0 * m.inter * m.hidden;
  if (m.stage != MoeStage::kGateUp) per_token += 2.0 * m.out_dim * m.inter;
  per_token *= static_cast<double>(m.top_k);
  const int64_t n = std::clamp<int64_t>(static_cast<int64_t>(max_flops / per_token), 1, m.tokens);
  MoeParams sp = m;
  sp.tokens = n;
  MoeInputs in = c.moe_in;
  const int64_t rows = m.stage == MoeStage::kDown ? n * m.top_k : n;
  in.x.desc.shape[0] = rows;
  in.topk_ids.desc.shape[0] = n;
  if (!in.topk_weights.empty()) in.topk_weights.desc.shape[0] = n;
  OracleSample out;
  KS_ASSIGN_OR_RETURN(out.reference, oracle::Moe(sp, in));
  for (int64_t i = 0; i < static_cast<int64_t>(out.reference.size()); ++i) out.index.push_back(i);
  out.desc = absl::StrCat("the first ", n, " of ", m.tokens, " tokens");
  return out;
}

}  // namespace

absl::StatusOr<OracleSample> OracleReferenceSample(const OpCall& host_call, double max_flops) {
  switch (host_call.op) {
    case BenchOp::kAttention:
    case BenchOp::kFp8Attention:
      return SampleAttention(host_call, max_flops);
    case BenchOp::kMlaDecode:
      return SampleMla(host_call, max_flops);
    default:
      return SampleMoe(host_call, max_flops);
  }
}

absl::StatusOr<std::vector<double>> OracleReference(const OpCall& host_call) {
  return Compute(host_call, /*reference=*/true);
}

absl::StatusOr<std::vector<double>> OracleOutput(const OpCall& host_call) {
  return Compute(host_call, /*reference=*/false);
}

absl::Status RegisterOracleVariants(VariantRegistry* registry) {
  for (BenchOp op : kAllBenchOps) {
    Variant v;
    v.op = op;
    v.name = "oracle";
    v.backend = "host";
    v.on_host = true;
    v.description = "fp64 oracle (kernels/cpu), rounded once to bf16; slow";
    v.run = [](Backend&, int, const OpCall& call, TensorView& out) -> absl::Status {
      KS_ASSIGN_OR_RETURN(std::vector<double> o, OracleOutput(call));
      if (static_cast<int64_t>(o.size()) != out.desc.num_elements()) {
        return absl::InternalError("oracle output size does not match the op's output");
      }
      numerics::StoreDoubles(o.data(), static_cast<int64_t>(o.size()), out.desc.dtype,
                             CallRounding(call), out.data);
      return absl::OkStatus();
    };
    KS_RETURN_IF_ERROR(registry->Register(std::move(v)));
  }
  return absl::OkStatus();
}

}  // namespace kernelserve
