// Helpers for the cpu backend's tests (and the GPU kernels' CPU emulations):
// fresh seeds, poisoned outputs, random MoE problems, and comparisons of bf16
// outputs against the fp64 oracle.
#ifndef KERNELSERVE_KERNELS_CPU_CPU_TEST_UTIL_H_
#define KERNELSERVE_KERNELS_CPU_CPU_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/api/ops.h"
#include "kernels/api/tensor.h"
#include "kernels/numerics/numerics.h"
#include "kernels/numerics/test_inputs.h"

namespace kernelserve {
namespace cpu_test {

// A fresh seed per call; tests print it (SCOPED_TRACE) so a failure can be
// replayed with KERNELSERVE_TEST_SEED=<seed>, which every call then returns.
inline uint64_t FreshSeed() {
  if (const char* replay = std::getenv("KERNELSERVE_TEST_SEED"); replay != nullptr && *replay != '\0') {
    return std::strtoull(replay, nullptr, 10);
  }
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

// An output tensor filled with 0xFF bytes (a NaN pattern in bf16).
inline HostTensor PoisonedBf16(const Shape& shape) {
  HostTensor t(DType::kBf16, shape);
  std::memset(t.bytes(), 0xFF, t.num_bytes());
  return t;
}

inline std::vector<double> Bf16ToDoubles(const HostTensor& t) {
  std::vector<double> out(t.num_elements());
  for (int64_t i = 0; i < t.num_elements(); ++i) out[i] = numerics::Bf16ToFloat(t.data<uint16_t>()[i]);
  return out;
}

// Distance in representable bf16 values between two finite bf16 bit patterns.
inline int64_t Bf16UlpDistance(uint16_t a, uint16_t b) {
  auto ordered = [](uint16_t x) -> int64_t {
    return (x & 0x8000) ? -static_cast<int64_t>(x & 0x7FFF) : static_cast<int64_t>(x);
  };
  const int64_t d = ordered(a) - ordered(b);
  return d < 0 ? -d : d;
}

struct Bf16Comparison {
  double rel_rms = 0;
  int64_t nonfinite = 0;        // output NaN/Inf where the oracle is finite
  int64_t exact = 0;            // bits equal to DoubleToBf16(oracle, mode)
  int64_t far = 0;              // more than `max_ulp` from it and beyond the abs floor
  int64_t n = 0;
  std::string first_far;
};

// Compares a bf16 output with the unrounded fp64 oracle. An element is "far"
// when it is more than max_ulp bf16 steps from the oracle rounded in `mode`
// and also more than abs_floor (relative to the largest |ref|) away: values
// that cancel to near zero carry the fp32 error of their inputs, which a
// one-ulp check on the small result would overstate.
inline Bf16Comparison CompareBf16(const HostTensor& out, const std::vector<double>& ref, Rounding mode,
                                  int64_t max_ulp = 1, double abs_floor = 2e-3) {
  Bf16Comparison c;
  c.n = out.num_elements();
  double amax = 0;
  for (double r : ref) {
    if (std::isfinite(r)) amax = std::max(amax, std::fabs(r));
  }
  double err2 = 0, ref2 = 0;
  for (int64_t i = 0; i < c.n; ++i) {
    const uint16_t got = out.data<uint16_t>()[i];
    const double g = numerics::Bf16ToFloat(got);
    if (!std::isfinite(ref[i])) continue;
    if (!std::isfinite(g)) {
      ++c.nonfinite;
      continue;
    }
    err2 += (g - ref[i]) * (g - ref[i]);
    ref2 += ref[i] * ref[i];
    const uint16_t want = numerics::DoubleToBf16(ref[i], mode);
    if (got == want) {
      ++c.exact;
      continue;
    }
    if (Bf16UlpDistance(got, want) > max_ulp && std::fabs(g - ref[i]) > abs_floor * amax) {
      if (c.far == 0) {
        c.first_far = absl::StrCat("element ", i, ": got ", g, " want ", ref[i], " (",
                                   numerics::Bf16ToFloat(want), " rounded)");
      }
      ++c.far;
    }
  }
  c.rel_rms = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  return c;
}

struct MoeWeights {
  HostTensor w13, w13_scales, w2, w2_scales;
};

// Random MXFP4 weights: every nibble value, scales 2^-4 .. 2^2.
inline void FillMxfp4(HostTensor& w, HostTensor& s, std::mt19937_64& rng) {
  for (int64_t i = 0; i < w.num_bytes(); ++i) w.bytes()[i] = static_cast<uint8_t>(rng());
  std::uniform_int_distribution<int> e(123, 129);
  for (int64_t i = 0; i < s.num_bytes(); ++i) s.bytes()[i] = static_cast<uint8_t>(e(rng));
}

// A random MXFP4 MoE call's host tensors: Gaussian bf16 activations per
// token [T, K] and per pair [T * top_k, I], top_k distinct experts per token
// with weights in [0.05, 1), MXFP4 weights W13 [E, 2I, K] and W2 [E, K, I].
struct MoeProblem {
  int64_t tokens, top_k, experts, hidden, inter;
  HostTensor x_tokens, x_pairs, ids, weights;
  MoeWeights w;
};

inline MoeProblem MakeMoeProblem(int64_t tokens, int64_t top_k, int64_t experts, int64_t hidden, int64_t inter,
                                 uint64_t seed) {
  MoeProblem pr{tokens, top_k, experts, hidden, inter, {}, {}, {}, {}, {}};
  std::mt19937_64 rng(seed);
  pr.x_tokens = numerics::GaussianBf16({tokens, hidden}, seed + 1);
  pr.x_pairs = numerics::GaussianBf16({tokens * top_k, inter}, seed + 2);
  pr.ids = HostTensor(DType::kInt32, {tokens, top_k});
  pr.weights = HostTensor(DType::kFp32, {tokens, top_k});
  std::vector<int32_t> all(experts);
  std::iota(all.begin(), all.end(), 0);
  std::uniform_real_distribution<float> uw(0.05f, 1.0f);
  for (int64_t t = 0; t < tokens; ++t) {
    std::shuffle(all.begin(), all.end(), rng);  // distinct experts per token
    for (int64_t r = 0; r < top_k; ++r) {
      pr.ids.data<int32_t>()[t * top_k + r] = all[r];
      pr.weights.data<float>()[t * top_k + r] = uw(rng);
    }
  }
  pr.w.w13 = HostTensor(DType::kFp4E2M1, {experts, 2 * inter, hidden});
  pr.w.w13_scales = HostTensor(DType::kE8M0, {experts, 2 * inter, hidden / 32});
  pr.w.w2 = HostTensor(DType::kFp4E2M1, {experts, hidden, inter});
  pr.w.w2_scales = HostTensor(DType::kE8M0, {experts, hidden, inter / 32});
  FillMxfp4(pr.w.w13, pr.w.w13_scales, rng);
  FillMxfp4(pr.w.w2, pr.w.w2_scales, rng);
  return pr;
}

// The views of `pr` a call at `stage` reads: x per token and W13 (gate/up,
// the layer), x per pair and W2 (down), W13 and W2 (the layer).
inline MoeInputs MoeProblemInputs(const MoeProblem& pr, MoeStage stage) {
  const bool gate_up = stage != MoeStage::kDown, down = stage != MoeStage::kGateUp;
  return MoeInputs{stage == MoeStage::kDown ? pr.x_pairs.view() : pr.x_tokens.view(),
                   pr.ids.view(),
                   pr.weights.view(),
                   gate_up ? pr.w.w13.view() : TensorView{},
                   gate_up ? pr.w.w13_scales.view() : TensorView{},
                   down ? pr.w.w2.view() : TensorView{},
                   down ? pr.w.w2_scales.view() : TensorView{}};
}

inline HostTensor Int32Tensor(const std::vector<int32_t>& v) {
  HostTensor t(DType::kInt32, {static_cast<int64_t>(v.size())});
  std::memcpy(t.bytes(), v.data(), v.size() * sizeof(int32_t));
  return t;
}

inline bool BitwiseEqual(const HostTensor& a, const HostTensor& b) {
  return a.num_bytes() == b.num_bytes() && std::memcmp(a.bytes(), b.bytes(), a.num_bytes()) == 0;
}

// The decode ops' tolerance (one bf16 rounding after fp32 accumulation):
// no non-finite output, rel_rms < 1e-2, no element far from the rounded
// oracle (CompareBf16), >= 90% bit-equal.
inline void ExpectDecodeMatchesOracle(const HostTensor& out, const std::vector<double>& ref, Rounding rounding) {
  const Bf16Comparison cmp = CompareBf16(out, ref, rounding);
  EXPECT_EQ(cmp.nonfinite, 0);
  EXPECT_LT(cmp.rel_rms, 1e-2);
  EXPECT_EQ(cmp.far, 0) << cmp.first_far;
  EXPECT_GE(cmp.exact, cmp.n * 9 / 10) << "exact " << cmp.exact << " of " << cmp.n;
}

// Ragged windows: for output [B, q_len, row...] (row elements per new token),
// rows t >= q_lens[b] must be bf16 zeros (and the oracle's exact zeros), the
// others not all zero.
inline void ExpectZeroRowsPastWindows(const HostTensor& out, const std::vector<double>& ref, int64_t q_len,
                                      int64_t row, const std::vector<int32_t>& q_lens) {
  for (size_t b = 0; b < q_lens.size(); ++b) {
    for (int64_t t = 0; t < q_len; ++t) {
      const bool past = t >= q_lens[b];
      const int64_t base = (static_cast<int64_t>(b) * q_len + t) * row;
      bool all_zero = true;
      for (int64_t i = 0; i < row; ++i) {
        all_zero &= out.data<uint16_t>()[base + i] == 0;
        if (past) {
          ASSERT_EQ(ref[base + i], 0.0);
        }
      }
      EXPECT_EQ(all_zero, past) << "b=" << b << " t=" << t;
    }
  }
}

}  // namespace cpu_test
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_CPU_CPU_TEST_UTIL_H_
