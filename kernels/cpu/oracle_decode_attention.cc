// fp64 oracle of decode attention over a PER_HEAD_KV pool (numerics in
// kernels/api/ops.h, DecodeAttentionParams): exact decode of every element,
// fp64 dot products, softmax and P.V, one request at a time.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/oracle.h"
#include "kernels/numerics/numerics.h"

namespace kernelserve {
namespace oracle {

absl::StatusOr<std::vector<double>> DecodeAttention(const DecodeAttentionParams& p,
                                                    const DecodeAttentionInputs& in) {
  for (const TensorView* t : {&in.q, &in.kv, &in.seq_lens, &in.kv_indices, &in.kv_indptr}) {
    if (t->data == nullptr) {
      return absl::InvalidArgumentError("decode attention oracle: q, kv, seq_lens, kv_indices and kv_indptr are required");
    }
  }
  const int64_t B = p.batch, Q = p.q_len, Hq = p.heads_q, Hkv = p.heads_kv, D = p.head_dim;
  if (in.q.desc.num_elements() != B * Q * Hq * D || in.kv.desc.dtype != p.kv_dtype ||
      in.kv.desc.num_elements() != p.num_slots * 2 * Hkv * D) {
    return absl::InvalidArgumentError("decode attention oracle: inputs do not match the params (run Validate first)");
  }
  const std::vector<double> q = numerics::ToDoubles(in.q);
  const int32_t* seq_lens = in.seq_lens.as<const int32_t>();
  const int32_t* indices = in.kv_indices.as<const int32_t>();
  const int32_t* indptr = in.kv_indptr.as<const int32_t>();
  const int32_t* q_lens = in.q_lens.empty() ? nullptr : in.q_lens.as<const int32_t>();
  const int64_t row = 2 * Hkv * D;
  const int64_t group = Hq / Hkv;
  std::vector<double> out(B * Q * Hq * D, 0.0);
  std::vector<double> kv;  // this request's rows, token order, dequantized and scaled
  for (int64_t b = 0; b < B; ++b) {
    const int64_t seq = seq_lens[b];
    const int64_t qlen = q_lens != nullptr ? q_lens[b] : Q;
    kv.assign(seq * row, 0.0);
    for (int64_t j = 0; j < seq; ++j) {
      const int64_t slot = static_cast<int64_t>(indices[indptr[b] + j / p.page_size]) * p.page_size + j % p.page_size;
      if (slot < 0 || slot >= p.num_slots) {
        return absl::InvalidArgumentError(absl::StrCat("decode attention oracle: slot ", slot, " out of range"));
      }
      for (int64_t e = 0; e < row; ++e) {
        kv[j * row + e] = numerics::ElementToDouble(p.kv_dtype, in.kv.data, slot * row + e) * p.kv_scale;
      }
    }
#pragma omp parallel for schedule(dynamic)
    for (int64_t th = 0; th < qlen * Hq; ++th) {
      const int64_t t = th / Hq, h = th % Hq, hkv = h / group;
      const int64_t visible = seq - qlen + t + 1;  // keys [0, seq - qlen + t]
      const double* qv = q.data() + ((b * Q + t) * Hq + h) * D;
      std::vector<double> scores(visible);
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < visible; ++j) {
        const double* k = kv.data() + j * row + hkv * D;
        double s = 0;
        for (int64_t d = 0; d < D; ++d) s += qv[d] * k[d];
        scores[j] = s * p.scale;
        m = std::max(m, scores[j]);
      }
      double l = 0;
      double* o = out.data() + ((b * Q + t) * Hq + h) * D;
      for (int64_t j = 0; j < visible; ++j) {
        const double w = std::exp(scores[j] - m);
        l += w;
        const double* v = kv.data() + j * row + (Hkv + hkv) * D;
        for (int64_t d = 0; d < D; ++d) o[d] += w * v[d];
      }
      for (int64_t d = 0; d < D; ++d) o[d] /= l;
    }
  }
  return out;
}

}  // namespace oracle
}  // namespace kernelserve
