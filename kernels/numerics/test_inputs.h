// Seeded inputs for tests and benchmarks: Gaussian bf16 tensors and the
// long-tail attention input of DESIGN §4 (an attention sink and a local window
// over a diffuse tail that carries real mass, V with a non-zero mean). The
// random stream is defined here (splitmix64 + Box-Muller), so a seed gives the
// same tensors on every platform.
#ifndef KERNELSERVE_KERNELS_NUMERICS_TEST_INPUTS_H_
#define KERNELSERVE_KERNELS_NUMERICS_TEST_INPUTS_H_

#include <cstdint>
#include <vector>

#include "kernels/api/ops.h"
#include "kernels/api/tensor.h"

namespace kernelserve {
namespace numerics {

// Deterministic generator: splitmix64 bits, Box-Muller normals.
class SeededRng {
 public:
  explicit SeededRng(uint64_t seed) : state_(seed) {}
  uint64_t NextBits();
  double Uniform();  // [0, 1)
  double Normal();   // N(0, 1)

 private:
  uint64_t state_;
  bool has_spare_ = false;
  double spare_ = 0;
};

// bf16 tensor of `shape` with i.i.d. N(mean, stddev^2) entries rounded RTNE.
HostTensor GaussianBf16(const Shape& shape, uint64_t seed, double mean = 0.0, double stddev = 1.0);

// Long-tail attention inputs. Scores are designed in base-2 units
// t = q.k * scale * log2(e) with scale = softmax_scale (0: 1/sqrt(d_qk)).
// Query i sits at key position i + seq_kv - seq_q (bottom-right aligned).
// Head dimensions of Q and K:
//   dim 0            sink: q = k_0 = sqrt(sink_binades * c), other keys 0, so
//                    key 0 scores sink_binades above the tail;
//   dims 1..2F       a local window: RoPE-like pairs (cos w_f p, sin w_f p) with
//                    F = freq_pairs random frequencies w_f uniform in (0, pi/window],
//                    amplitude sqrt(window_binades * c / F): keys within about
//                    `window` positions of the query score up to window_binades
//                    above the tail, far keys get incoherent +-window_binades/sqrt(2F);
//   the other dims   diffuse tail: N(0, a^2) entries in q and k with
//                    a^2 sqrt(n) = tail_sigma * c, so tail scores spread by
//                    tail_sigma binades;
// with c = 1 / (scale * log2 e). V is N(v_mean, v_std^2) per element. With the
// defaults and 4K keys the sink is (near) the row maximum, the tail lies
// ~10-12 binades below it (under e4m3's 2^-9 when P is not block-scaled),
// 45-60 of the 64 key blocks have their maximum more than 8 binades below the
// row maximum, and keys outside the sink and a 2*window neighbourhood hold
// 15-30 % of the softmax mass (test_inputs_test prints these per row).
struct LongTailOptions {
  int64_t batch = 1, heads_q = 1, heads_kv = 1, seq_q = 4096, seq_kv = 4096;
  int64_t d_qk = 128, d_v = 128;
  Layout layout = Layout::kBhsd;
  double softmax_scale = 0;  // 0: 1/sqrt(d_qk)
  double sink_binades = 12.0;
  double window_binades = 10.0;
  int64_t window = 32;
  int freq_pairs = 24;
  double tail_sigma = 1.0;
  double v_mean = 1.0;
  double v_std = 1.0;
  uint64_t seed = 1;
};

struct AttentionTensors {
  HostTensor q, k, v;  // bf16, layout as requested
};

AttentionTensors LongTailAttention(const LongTailOptions& opt);

// FP8 attention inputs with prescribed scores, for analytic tests of the P
// modes (DESIGN §4). One query row, BHSD, B = H = 1: Q [1,1,1,d_qk] holds 1.0
// in dims 0..7 and 0 elsewhere; key j holds in its dims 0..7 FP8 values that
// sum exactly to t[j] (the rest 0), so q.k_j = t[j] exactly in fp64 and in
// fp32. Called with softmax_scale = kConstructedScoresScale (ln 2) the base-2
// score t = q.k * scale * log2(e) is t[j] up to the rounding of that product
// (a few fp64 ulps; in fp32 the folded factor scale * log2 e rounds to 1), so
// chosen t[j] should stay away from integers and rounding midpoints.
// V [1,1,Skv,d_v] is `v` (row-major Skv x d_v); its values must be FP8 values
// of `fp8`. Descales are fp32 [1] tensors equal to 1. Returns false when a
// t[j] needs more than 8 FP8 terms, a v value is not representable or the
// sizes disagree.
constexpr double kConstructedScoresScale = 0.69314718055994530942;  // ln 2

struct Fp8AttentionTensors {
  HostTensor q, k, v;                          // FP8 codes
  HostTensor q_descale, k_descale, v_descale;  // fp32 [1], all 1
};

bool ConstructedScoresFp8(DType fp8, int64_t d_qk, int64_t d_v, const std::vector<double>& t,
                          const std::vector<double>& v, Fp8AttentionTensors* out);

}  // namespace numerics
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_NUMERICS_TEST_INPUTS_H_
