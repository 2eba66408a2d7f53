// Times the cpu backend's MXFP4 MoE on the Kimi-K3 TP8 shard (DESIGN §4):
// E=896 experts, hidden K=N=3584, intermediate I=384, top-16 routing, at
// T=8 and T=32 tokens: gate/up (with SwiGLU), down (weighted sum) and the
// whole layer. Weights are random MXFP4 (about 1.9 GB); routing is uniform.
// Usage: cpu_moe_bench [reps threads]
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "bench/bench_util.h"
#include "kernels/api/backend.h"
#include "kernels/api/ops.h"
#include "kernels/api/tensor.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/numerics/numerics.h"
#include "kernels/numerics/test_inputs.h"

namespace kernelserve {
namespace {

constexpr int64_t kExperts = 896, kHidden = 3584, kInter = 384, kTopK = 16;

void FillRandomBytes(HostTensor& t, uint8_t lo, uint8_t hi, uint64_t seed) {
  const int64_t n = t.num_bytes();
  const int64_t chunk = 1 << 20;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < (n + chunk - 1) / chunk; ++c) {
    uint64_t s = seed ^ (0x9E3779B97F4A7C15ull * (c + 1));
    for (int64_t i = c * chunk; i < std::min(n, (c + 1) * chunk); ++i) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      const uint8_t r = static_cast<uint8_t>(s >> 56);
      t.bytes()[i] = static_cast<uint8_t>(lo + r % (hi - lo + 1));
    }
  }
}

int Main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 3;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 0;
  std::unique_ptr<Backend> be = CreateCpuBackend(threads);
  HostTensor w13(DType::kFp4E2M1, {kExperts, 2 * kInter, kHidden});
  HostTensor w13s(DType::kE8M0, {kExperts, 2 * kInter, kHidden / 32});
  HostTensor w2(DType::kFp4E2M1, {kExperts, kHidden, kInter});
  HostTensor w2s(DType::kE8M0, {kExperts, kHidden, kInter / 32});
  FillRandomBytes(w13, 0, 255, 1);
  FillRandomBytes(w13s, 120, 126, 2);
  FillRandomBytes(w2, 0, 255, 3);
  FillRandomBytes(w2s, 120, 126, 4);
  std::printf("cpu MoE bench, Kimi-K3 TP8 shard E=%lld K=%lld I=%lld N=%lld top_k=%lld, threads=%d, best of %d\n",
              static_cast<long long>(kExperts), static_cast<long long>(kHidden), static_cast<long long>(kInter),
              static_cast<long long>(kHidden), static_cast<long long>(kTopK), be->GetDeviceInfo(0).compute_units,
              reps);
  std::printf("| T | stage | best ms | mean ms | experts hit | MXFP4 weight bytes read | GB/s |\n|---|---|---|---|---|---|---|\n");
  std::mt19937_64 rng(5);
  for (int64_t tokens : {8, 32}) {
    HostTensor ids(DType::kInt32, {tokens, kTopK}), wts(DType::kFp32, {tokens, kTopK});
    std::vector<int32_t> all(kExperts);
    std::iota(all.begin(), all.end(), 0);
    std::vector<bool> hit(kExperts, false);
    for (int64_t t = 0; t < tokens; ++t) {
      std::shuffle(all.begin(), all.end(), rng);
      for (int64_t r = 0; r < kTopK; ++r) {
        ids.data<int32_t>()[t * kTopK + r] = all[r];
        wts.data<float>()[t * kTopK + r] = 1.0f / kTopK;
        hit[all[r]] = true;
      }
    }
    const int64_t experts_hit = std::count(hit.begin(), hit.end(), true);
    const HostTensor x_tok = numerics::GaussianBf16({tokens, kHidden}, 6);
    const HostTensor x_pair = numerics::GaussianBf16({tokens * kTopK, kInter}, 7);
    const struct {
      MoeStage stage;
      const char* name;
    } stages[] = {{MoeStage::kGateUp, "gate/up+swiglu"}, {MoeStage::kDown, "down+weighted"}, {MoeStage::kLayer, "layer"}};
    for (const auto& s : stages) {
      MoeParams p;
      p.stage = s.stage;
      p.swiglu = true;
      p.weighted_sum = true;
      const bool gu = s.stage != MoeStage::kDown, dn = s.stage != MoeStage::kGateUp;
      const HostTensor& x = s.stage == MoeStage::kDown ? x_pair : x_tok;
      const TensorDesc wd = wts.desc(), a = w13.desc(), as = w13s.desc(), b = w2.desc(), bs = w2s.desc();
      absl::Status st = p.Validate(x.desc(), ids, &wd, gu ? &a : nullptr, gu ? &as : nullptr, dn ? &b : nullptr,
                                   dn ? &bs : nullptr);
      if (!st.ok()) {
        std::fprintf(stderr, "%s\n", st.ToString().c_str());
        return 1;
      }
      MoeInputs in{x.view(), ids.view(), wts.view(), w13.view(), w13s.view(), w2.view(), w2s.view()};
      HostTensor out(DType::kBf16, p.OutputDesc().shape);
      TensorView ov = out.view();
      const absl::StatusOr<bench::WallTimes> times = bench::TimeReps(reps, [&] { return be->Moe(0, p, in, ov); });
      if (!times.ok()) {
        std::fprintf(stderr, "%s\n", times.status().ToString().c_str());
        return 1;
      }
      const double best = times->best_s;
      // Packed FP4 plus E8M0 scales of the experts the routing touches.
      const double per_expert = (gu ? 2 * kInter * kHidden * (0.5 + 1.0 / 32) : 0) +
                                (dn ? kHidden * kInter * (0.5 + 1.0 / 32) : 0);
      const double bytes = per_expert * experts_hit;
      std::printf("| %lld | %s | %.2f | %.2f | %lld | %.0f MB | %.1f |\n", static_cast<long long>(tokens), s.name,
                  best * 1e3, times->mean_s * 1e3, static_cast<long long>(experts_hit), bytes * 1e-6,
                  bytes / best * 1e-9);
    }
  }
  return 0;
}

}  // namespace
}  // namespace kernelserve

int main(int argc, char** argv) { return kernelserve::Main(argc, argv); }
