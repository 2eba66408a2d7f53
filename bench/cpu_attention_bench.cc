// Times the cpu backend's bf16 attention. Default shape: B=1, H=8, S=4096,
// D=128, causal (the cpu backend's target: under 3 s on the 2-core CI machine).
// Usage: cpu_attention_bench [B H S D causal(0/1) reps threads mode]
// mode: bf16 (default), fp8-exact, fp8-lean or fp8-naive (bf16 inputs
// quantized per tensor by the backend, e4m3fn; D must be 128 or 192).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include "bench/bench_util.h"
#include "kernels/api/backend.h"
#include "kernels/api/ops.h"
#include "kernels/api/tensor.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/numerics/numerics.h"

namespace kernelserve {
namespace {

void FillGaussian(HostTensor& t, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  uint16_t* d = t.data<uint16_t>();
  for (int64_t i = 0; i < t.num_elements(); ++i) d[i] = numerics::FloatToBf16(dist(rng), Rounding::kRtne);
}

int Main(int argc, char** argv) {
  auto arg = [&](int i, int64_t def) { return argc > i ? std::atoll(argv[i]) : def; };
  const int64_t b = arg(1, 1), h = arg(2, 8), s = arg(3, 4096), d = arg(4, 128);
  const bool causal = arg(5, 1) != 0;
  const int reps = static_cast<int>(arg(6, 3));
  const int threads = static_cast<int>(arg(7, 0));
  const std::string mode = argc > 8 ? argv[8] : "bf16";
  std::mt19937 rng(1234);
  HostTensor q(DType::kBf16, {b, h, s, d}), k(DType::kBf16, {b, h, s, d}), v(DType::kBf16, {b, h, s, d});
  FillGaussian(q, rng);
  FillGaussian(k, rng);
  FillGaussian(v, rng);
  AttentionParams p;
  p.causal = causal;
  Fp8AttentionParams fp;
  fp.causal = causal;
  const bool fp8 = mode != "bf16";
  if (mode == "fp8-exact") {
    fp.p_mode = PMode::kExact;
  } else if (mode == "fp8-lean") {
    fp.p_mode = PMode::kLean;
  } else if (mode == "fp8-naive") {
    fp.p_mode = PMode::kNaive;
  } else if (fp8) {
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 1;
  }
  const absl::Status vst = fp8 ? fp.Validate(q.desc(), k.desc(), v.desc(), nullptr, nullptr, nullptr)
                               : p.Validate(q.desc(), k.desc(), v.desc());
  if (!vst.ok()) {
    std::fprintf(stderr, "%s\n", vst.ToString().c_str());
    return 1;
  }
  HostTensor out(DType::kBf16, fp8 ? fp.OutputDesc().shape : p.OutputDesc().shape);
  const Fp8AttentionInputs fin{q.view(), k.view(), v.view(), {}, {}, {}};
  std::unique_ptr<Backend> backend = CreateCpuBackend(threads);
  TensorView ov = out.view();
  const absl::StatusOr<bench::WallTimes> times = bench::TimeReps(reps, [&] {
    return fp8 ? backend->Fp8Attention(0, fp, fin, ov) : backend->Attention(0, p, q.view(), k.view(), v.view(), ov);
  });
  if (!times.ok()) {
    std::fprintf(stderr, "%s\n", times.status().ToString().c_str());
    return 1;
  }
  const double best = times->best_s;
  // Causal counts only unmasked (query, key) pairs.
  const double pairs = causal ? static_cast<double>(s) * (s + 1) / 2 : static_cast<double>(s) * s;
  const double flops = 4.0 * b * h * pairs * d;
  std::printf("cpu attention %s B=%lld H=%lld S=%lld D=%lld causal=%d threads=%d: best %.3f s, mean %.3f s, %.1f GFLOP/s\n",
              mode.c_str(), static_cast<long long>(b), static_cast<long long>(h), static_cast<long long>(s),
              static_cast<long long>(d), causal ? 1 : 0, backend->GetDeviceInfo(0).compute_units, best,
              times->mean_s, flops / best * 1e-9);
  return 0;
}

}  // namespace
}  // namespace kernelserve

int main(int argc, char** argv) { return kernelserve::Main(argc, argv); }
