// bf16 MHA forward on the cpu: flash-style tiles of 64 queries x 64 keys with
// an online softmax in fp32 (base-2 units, so exp is a cheap exp2). K and V of
// one KV head are converted to fp32 once (K transposed per key block, so the
// score micro-kernel broadcasts Q and streams K along the key axis), then the
// threads share the (head, query block) work items of that KV head's group.
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
#include "kernels/cpu/cpu_simd.h"
#include "kernels/numerics/numerics.h"

namespace kernelserve {
namespace cpu {
namespace {

using tiles::kBk;
using tiles::kBq;
using tiles::kLog2e;
using tiles::kNegInf;
using tiles::PvTile;
using tiles::PvTileVisibleOnly;
using tiles::ScoreTile;
using tiles::SoftmaxRow;

template <int D>
struct Scratch {
  std::vector<float> q = std::vector<float>(kBq * D);
  std::vector<float> s = std::vector<float>(kBq * kBk);
  std::vector<float> o = std::vector<float>(kBq * D);
  float m[kBq], l[kBq], alpha[kBq];
  int valid[kBq];
};

struct HeadCtx {
  const AttentionParams* p;
  const uint16_t* q;
  uint16_t* out;
  const float* kt;       // [nkb][D][kBk]
  const float* v;        // [nkb * kBk][D]
  const uint8_t* v_bad;  // per key block: V holds Inf/NaN
  float score_scale;
  int64_t b;
};

template <int D>
void QueryBlock(const HeadCtx& c, int64_t hq, int64_t q0, Scratch<D>& sc) {
  const AttentionParams& p = *c.p;
  const int64_t sq = p.seq_q, skv = p.seq_kv;
  const int rows = static_cast<int>(std::min<int64_t>(kBq, sq - q0));
  const int rows4 = (rows + 3) & ~3;
  for (int i = 0; i < rows; ++i) {
    Bf16RowToFloatN<D>(c.q + p.Offset(c.b, hq, q0 + i, p.heads_q, sq, D), sc.q.data() + i * D);
  }
  std::fill(sc.q.begin() + rows * D, sc.q.begin() + rows4 * D, 0.0f);
  std::fill(sc.o.begin(), sc.o.begin() + rows4 * D, 0.0f);
  // Last visible key of row i (bottom-right aligned causal mask).
  auto lim = [&](int i) -> int64_t {
    return p.causal ? std::min(q0 + i + skv - sq, skv - 1) : skv - 1;
  };
  for (int i = 0; i < rows4; ++i) {
    sc.m[i] = kNegInf;
    sc.l[i] = 0;
  }
  const int64_t max_lim = lim(rows - 1);
  for (int64_t kb = 0; max_lim >= 0 && kb <= max_lim / kBk; ++kb) {
    const int64_t k0 = kb * kBk;
    const int kcount = static_cast<int>(std::min<int64_t>(kBk, max_lim - k0 + 1));
    ScoreTile<D>(sc.q.data(), c.kt + kb * D * kBk, rows4, kcount, sc.s.data());
    for (int i = 0; i < rows4; ++i) {
      float* srow = sc.s.data() + i * kBk;
      const int valid = i < rows ? static_cast<int>(std::clamp<int64_t>(lim(i) - k0 + 1, 0, kBk)) : 0;
      sc.valid[i] = valid;
      if (valid == 0) {
        std::fill(srow, srow + kBk, 0.0f);
        sc.alpha[i] = 1.0f;
        continue;
      }
      sc.alpha[i] = SoftmaxRow(srow, valid, c.score_scale, &sc.m[i], &sc.l[i]);
    }
    if (c.v_bad[kb]) {
      PvTileVisibleOnly<D>(sc.s.data(), c.v + k0 * D, sc.alpha, sc.valid, rows, sc.o.data());
    } else {
      PvTile<D>(sc.s.data(), c.v + k0 * D, sc.alpha, rows4, kcount, sc.o.data());
    }
  }
  for (int i = 0; i < rows; ++i) {
    uint16_t* dst = c.out + p.Offset(c.b, hq, q0 + i, p.heads_q, sq, D);
    const float* oi = sc.o.data() + i * D;
    if (lim(i) < 0) {
      // No visible key: defined as 0.
      for (int d = 0; d < D; ++d) dst[d] = numerics::FloatToBf16(0.0f, p.rounding);
      continue;
    }
    const float l = sc.l[i];
    for (int d = 0; d < D; ++d) dst[d] = numerics::FloatToBf16(oi[d] / l, p.rounding);
  }
}

// Converts key block kb of KV head (b, hkv) to fp32: K transposed to
// [D][kBk], V row-major; keys past Skv are zeros. Flags V blocks holding Inf/NaN.
template <int D>
void ConvertKvBlock(const AttentionParams& p, const uint16_t* kp, const uint16_t* vp, int64_t b,
                    int64_t hkv, int64_t kb, float* kt, float* vf, uint8_t* v_bad) {
  const int64_t skv = p.seq_kv;
  float row[D];
  float* ktb = kt + kb * D * kBk;
  bool bad = false;
  for (int jj = 0; jj < kBk; ++jj) {
    const int64_t j = kb * kBk + jj;
    float* vrow = vf + j * D;
    if (j >= skv) {
      for (int d = 0; d < D; ++d) ktb[d * kBk + jj] = 0.0f;
      std::fill(vrow, vrow + D, 0.0f);
      continue;
    }
    Bf16RowToFloatN<D>(kp + p.Offset(b, hkv, j, p.heads_kv, skv, D), row);
    for (int d = 0; d < D; ++d) ktb[d * kBk + jj] = row[d];
    Bf16RowToFloatN<D>(vp + p.Offset(b, hkv, j, p.heads_kv, skv, D), vrow);
    for (int d = 0; d < D; ++d) bad |= !std::isfinite(vrow[d]);
  }
  v_bad[kb] = bad;
}

template <int D>
absl::Status AttentionImpl(const AttentionParams& p, const TensorView& q, const TensorView& k,
                           const TensorView& v, TensorView& out, int threads) {
  const int64_t nkb = (p.seq_kv + kBk - 1) / kBk;
  const int64_t nqb = (p.seq_q + kBq - 1) / kBq;
  const int64_t group = p.heads_q / p.heads_kv;
  const uint16_t* kp = k.as<const uint16_t>();
  const uint16_t* vp = v.as<const uint16_t>();
  HeadCtx c;
  c.p = &p;
  c.q = q.as<const uint16_t>();
  c.out = out.as<uint16_t>();
  c.score_scale = static_cast<float>(p.scale) * kLog2e;
  tiles::RunAttentionSchedule<Scratch<D>>(
      c, p.batch, p.heads_kv, group, nqb, nkb, nkb * D * kBk, nkb * kBk * D, threads,
      [&](int64_t b, int64_t hkv, int64_t kb, float* kt, float* vf, uint8_t* v_bad) {
        ConvertKvBlock<D>(p, kp, vp, b, hkv, kb, kt, vf, v_bad);
      },
      [](const HeadCtx& ctx, int64_t hq, int64_t q0, Scratch<D>& sc) { QueryBlock<D>(ctx, hq, q0, sc); });
  return absl::OkStatus();
}

}  // namespace

absl::Status Attention(const AttentionParams& p, const TensorView& q, const TensorView& k,
                       const TensorView& v, TensorView& out, int threads) {
  if (q.desc.dtype != DType::kBf16 || k.desc.dtype != DType::kBf16 ||
      v.desc.dtype != DType::kBf16 || out.desc.dtype != DType::kBf16) {
    return absl::InvalidArgumentError("attention on the cpu backend takes bf16 q, k, v and out");
  }
  if (out.desc.num_elements() != p.batch * p.heads_q * p.seq_q * p.head_dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention output has ", out.desc.num_elements(), " elements, expected ",
                     p.batch * p.heads_q * p.seq_q * p.head_dim));
  }
  if (p.heads_kv <= 0 || p.heads_q % p.heads_kv != 0) {
    return absl::InvalidArgumentError("attention heads_q must be a multiple of heads_kv");
  }
  switch (p.head_dim) {
    case 64:
      return AttentionImpl<64>(p, q, k, v, out, threads);
    case 128:
      return AttentionImpl<128>(p, q, k, v, out, threads);
    case 256:
      return AttentionImpl<256>(p, q, k, v, out, threads);
    default:
      return absl::UnimplementedError(
          absl::StrCat("attention head_dim=", p.head_dim,
                       " is not implemented by the cpu backend (has 64, 128, 256)"));
  }
}

}  // namespace cpu
}  // namespace kernelserve
