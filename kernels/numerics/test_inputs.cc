#include "kernels/numerics/test_inputs.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/numerics/numerics.h"

namespace kernelserve {
namespace numerics {
namespace {

void PutBf16(HostTensor& t, int64_t i, double v) {
  const uint16_t b = DoubleToBf16(v, Rounding::kRtne);
  std::memcpy(t.bytes() + 2 * i, &b, 2);
}

int64_t Offset(Layout layout, int64_t b, int64_t h, int64_t s, int64_t heads, int64_t seq, int64_t d) {
  return layout == Layout::kBhsd ? ((b * heads + h) * seq + s) * d : ((b * seq + s) * heads + h) * d;
}

Shape AttnShape(Layout layout, int64_t b, int64_t h, int64_t s, int64_t d) {
  return layout == Layout::kBhsd ? Shape{b, h, s, d} : Shape{b, s, h, d};
}

}  // namespace

uint64_t SeededRng::NextBits() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double SeededRng::Uniform() { return static_cast<double>(NextBits() >> 11) * 0x1.0p-53; }

double SeededRng::Normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  double u1 = Uniform();
  while (u1 <= 0) u1 = Uniform();
  const double u2 = Uniform();
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double a = 2.0 * M_PI * u2;
  spare_ = r * std::sin(a);
  has_spare_ = true;
  return r * std::cos(a);
}

HostTensor GaussianBf16(const Shape& shape, uint64_t seed, double mean, double stddev) {
  HostTensor t(DType::kBf16, shape);
  SeededRng rng(seed);
  const int64_t n = t.num_elements();
  for (int64_t i = 0; i < n; ++i) PutBf16(t, i, mean + stddev * rng.Normal());
  return t;
}

AttentionTensors LongTailAttention(const LongTailOptions& o) {
  AttentionTensors out;
  out.q = HostTensor(DType::kBf16, AttnShape(o.layout, o.batch, o.heads_q, o.seq_q, o.d_qk));
  out.k = HostTensor(DType::kBf16, AttnShape(o.layout, o.batch, o.heads_kv, o.seq_kv, o.d_qk));
  out.v = HostTensor(DType::kBf16, AttnShape(o.layout, o.batch, o.heads_kv, o.seq_kv, o.d_v));
  const double scale = o.softmax_scale > 0 ? o.softmax_scale : 1.0 / std::sqrt(static_cast<double>(o.d_qk));
  const double c = 1.0 / (scale * M_LOG2E);
  const int64_t pairs = std::max<int64_t>(0, std::min<int64_t>(o.freq_pairs, (o.d_qk - 2) / 2));
  const int64_t noise_dims = o.d_qk - 1 - 2 * pairs;
  SeededRng rng(o.seed);
  std::vector<double> freq(pairs);
  for (double& w : freq) w = M_PI / static_cast<double>(std::max<int64_t>(1, o.window)) * (1.0 - rng.Uniform());
  const double sink_amp = std::sqrt(o.sink_binades * c);
  const double win_amp = pairs > 0 ? std::sqrt(o.window_binades * c / pairs) : 0.0;
  const double noise_amp =
      noise_dims > 0 ? std::sqrt(o.tail_sigma * c / std::sqrt(static_cast<double>(noise_dims))) : 0.0;
  // One vector of the Q/K construction at position `pos`.
  auto fill_qk = [&](HostTensor& t, int64_t base, int64_t pos, bool is_query) {
    PutBf16(t, base, (is_query || pos == 0) ? sink_amp : 0.0);
    for (int64_t f = 0; f < pairs; ++f) {
      PutBf16(t, base + 1 + 2 * f, win_amp * std::cos(freq[f] * pos));
      PutBf16(t, base + 2 + 2 * f, win_amp * std::sin(freq[f] * pos));
    }
    for (int64_t d = 1 + 2 * pairs; d < o.d_qk; ++d) PutBf16(t, base + d, noise_amp * rng.Normal());
  };
  for (int64_t b = 0; b < o.batch; ++b) {
    for (int64_t h = 0; h < o.heads_q; ++h) {
      for (int64_t i = 0; i < o.seq_q; ++i) {
        fill_qk(out.q, Offset(o.layout, b, h, i, o.heads_q, o.seq_q, o.d_qk), i + o.seq_kv - o.seq_q, true);
      }
    }
    for (int64_t h = 0; h < o.heads_kv; ++h) {
      for (int64_t j = 0; j < o.seq_kv; ++j) {
        fill_qk(out.k, Offset(o.layout, b, h, j, o.heads_kv, o.seq_kv, o.d_qk), j, false);
        const int64_t vb = Offset(o.layout, b, h, j, o.heads_kv, o.seq_kv, o.d_v);
        for (int64_t d = 0; d < o.d_v; ++d) PutBf16(out.v, vb + d, o.v_mean + o.v_std * rng.Normal());
      }
    }
  }
  return out;
}

bool ConstructedScoresFp8(DType fp8, int64_t d_qk, int64_t d_v, const std::vector<double>& t,
                          const std::vector<double>& v, Fp8AttentionTensors* out) {
  constexpr int64_t kTerms = 8;
  const int64_t skv = static_cast<int64_t>(t.size());
  if (d_qk < kTerms || d_v < 1 || static_cast<int64_t>(v.size()) != skv * d_v) return false;
  out->q = HostTensor(fp8, {1, 1, 1, d_qk});
  out->k = HostTensor(fp8, {1, 1, skv, d_qk});
  out->v = HostTensor(fp8, {1, 1, skv, d_v});
  const uint8_t zero = DoubleToFp8(0.0, fp8), one = DoubleToFp8(1.0, fp8);
  std::memset(out->q.bytes(), zero, static_cast<size_t>(d_qk));
  std::memset(out->q.bytes(), one, static_cast<size_t>(kTerms));
  std::memset(out->k.bytes(), zero, static_cast<size_t>(skv * d_qk));
  for (int64_t j = 0; j < skv; ++j) {
    // Greedy: each term is the remainder rounded to FP8, so the remainder
    // shrinks by at least 16x per term; every subtraction is exact in fp64.
    double rest = t[j];
    uint8_t* kj = out->k.bytes() + j * d_qk;
    for (int64_t d = 0; d < kTerms && rest != 0; ++d) {
      kj[d] = DoubleToFp8(rest, fp8);
      rest -= Fp8ToFloat(kj[d], fp8);
    }
    if (rest != 0) return false;
  }
  for (int64_t i = 0; i < skv * d_v; ++i) {
    const uint8_t c = DoubleToFp8(v[i], fp8);
    if (static_cast<double>(Fp8ToFloat(c, fp8)) != v[i]) return false;
    out->v.bytes()[i] = c;
  }
  for (HostTensor* ds : {&out->q_descale, &out->k_descale, &out->v_descale}) {
    *ds = HostTensor(DType::kFp32, {1});
    const float unit = 1.0f;
    std::memcpy(ds->bytes(), &unit, sizeof(unit));
  }
  return true;
}

}  // namespace numerics
}  // namespace kernelserve
