// Times the cpu backend's MLA decode (a16w8) on a contiguous fp8 KV cache.
// Usage: cpu_mla_bench [B S H q_len num_splits reps threads]
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "bench/bench_util.h"
#include "kernels/api/backend.h"
#include "kernels/api/ops.h"
#include "kernels/api/tensor.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/numerics/numerics.h"
#include "kernels/numerics/test_inputs.h"

namespace kernelserve {
namespace {

int Main(int argc, char** argv) {
  auto arg = [&](int i, int64_t def) { return argc > i ? std::atoll(argv[i]) : def; };
  const int64_t b = arg(1, 8), s = arg(2, 4096), h = arg(3, 128), q_len = arg(4, 1);
  const int64_t splits = arg(5, 0);
  const int reps = static_cast<int>(arg(6, 3));
  const int threads = static_cast<int>(arg(7, 0));
  const HostTensor q_lat = numerics::GaussianBf16({b, q_len, h, kMlaLatentDim}, 1);
  const HostTensor q_pe = numerics::GaussianBf16({b, q_len, h, kMlaRopeDim}, 2);
  HostTensor kv(DType::kFp8E4M3Fn, {b, s, kMlaRowDim});
  numerics::SeededRng rng(3);
  for (int64_t i = 0; i < kv.num_elements(); ++i) {
    kv.data<uint8_t>()[i] = numerics::FloatToFp8(static_cast<float>(4 * rng.Normal()), DType::kFp8E4M3Fn);
  }
  MlaDecodeParams p;
  p.kv_scale = 0.25;
  p.num_splits = splits;
  absl::Status st = p.Validate(q_lat.desc(), q_pe.desc(), kv.desc(), false, 1, nullptr, nullptr, nullptr, nullptr);
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", st.ToString().c_str());
    return 1;
  }
  std::unique_ptr<Backend> be = CreateCpuBackend(threads);
  HostTensor out(DType::kBf16, p.OutputDesc().shape);
  TensorView ov = out.view();
  const MlaDecodeInputs in{q_lat.view(), q_pe.view(), kv.view(), {}, {}, {}, {}};
  const absl::StatusOr<bench::WallTimes> times = bench::TimeReps(reps, [&] { return be->MlaDecode(0, p, in, ov); });
  if (!times.ok()) {
    std::fprintf(stderr, "%s\n", times.status().ToString().c_str());
    return 1;
  }
  const double best = times->best_s;
  const double kv_bytes = static_cast<double>(b) * s * kMlaRowDim;
  const double flops = 2.0 * b * q_len * h * s * (kMlaRowDim + kMlaLatentDim);
  std::printf("cpu mla decode B=%lld S=%lld H=%lld q_len=%lld splits=%lld threads=%d: best %.2f ms, mean %.2f ms, "
              "%.1f GFLOP/s, KV %.2f GB/s\n",
              static_cast<long long>(b), static_cast<long long>(s), static_cast<long long>(h),
              static_cast<long long>(q_len), static_cast<long long>(splits), be->GetDeviceInfo(0).compute_units,
              best * 1e3, times->mean_s * 1e3, flops / best * 1e-9, kv_bytes / best * 1e-9);
  return 0;
}

}  // namespace
}  // namespace kernelserve

int main(int argc, char** argv) { return kernelserve::Main(argc, argv); }
