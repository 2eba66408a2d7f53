// MXFP4 MoE grouped GEMMs on the GPU for the Kimi-K3 TP8 shard (E = 896,
// K = 3584, I = 384, N = 3584, top-16; each token draws 16 distinct experts,
// uniform) at T = 8, 32, 8192 (or --tokens=a,b,...). Timed as CUDA-graph
// replays (routing included), median of 20. TFLOP/s counts 2*rows*K*cols;
// GB/s counts the MXFP4 weight bytes of the experts the batch touches plus
// activations in and out; the roofline is max(those bytes / the copy
// bandwidth, FLOP / the bf16 GEMM rate), both measured in this run, and each
// row prints its time as a fraction of it. The whole layer is timed as one
// call next to the sum of its parts (gate/up+SwiGLU and down+weighted sum,
// the dispatcher's picks). Prints a markdown table: per projection one row
// for "default" (the dispatcher's pick) and one per entry of the variant
// table (MoeVariants) that serves it, all in the same run.
// --projections=NAME,... and --variants=NAME,... (names as printed, e.g.
// "default" or "wgmma_rs") keep only those rows, e.g. to profile one
// kernel under ncu.
#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "bench/cuda_bench_util.h"
#include "bench/roofline.h"
#include "kernels/api/ops.h"
#include "kernels/api/op_call.h"
#include "kernels/gpu/common/kernel_variant.h"
#include "kernels/gpu/moe/moe_variants.h"

namespace kernelserve {
namespace {

constexpr int64_t kE = 896, kK = 3584, kI = 384, kN = 3584, kTopK = 16;

void FillBytes(void* dev, size_t bytes, uint64_t seed, int kind) {
  std::vector<uint8_t> host = bench::RandomBytes(bytes, 32u << 20, seed);
  for (size_t i = 0; i < host.size(); ++i) {
    const uint8_t v = host[i];
    if (kind == 0) host[i] = v;                                       // fp4 nibbles
    if (kind == 1) host[i] = static_cast<uint8_t>(120 + v % 6);       // e8m0 scales
    if (kind == 2) host[i] = (i & 1) ? static_cast<uint8_t>(0x3F | (v & 0x80)) : v;  // bf16 ~ +-[0.5,2)
  }
  bench::CopyRepeated(dev, bytes, host);
}

// 3 warm-up replays, median of 20; us per call.
double TimeGraph(const std::vector<bench::StreamCall>& calls) { return bench::TimeGraphUs(calls, 3, 20); }

int Main(int argc, char** argv) {
  std::vector<int64_t> token_counts = {8, 32, 8192};
  std::vector<std::string> only_proj, only_var;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (const char* v = bench::FlagValue(a, "--tokens=")) {
      token_counts.clear();
      for (const std::string& t : bench::SplitCommas(v)) token_counts.push_back(std::atoll(t.c_str()));
    }
    if (const char* v = bench::FlagValue(a, "--projections=")) only_proj = bench::SplitCommas(v);
    if (const char* v = bench::FlagValue(a, "--variants=")) only_var = bench::SplitCommas(v);
  }
  if (!bench::HaveCudaDevice()) {
    std::printf("moe_cuda_bench: no CUDA device, nothing to time\n");
    return 0;
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  const absl::StatusOr<gpu::DeviceCaps> caps = gpu::QueryDeviceCaps(0);
  if (!caps.ok()) {
    std::fprintf(stderr, "%s\n", caps.status().ToString().c_str());
    return 1;
  }
  const int64_t max_t = *std::max_element(token_counts.begin(), token_counts.end());
  const bench::Ceilings ceil = bench::MeasureCeilings();

  uint8_t *w13, *w13s, *w2, *w2s;
  const size_t w13_bytes = kE * 2 * kI * kK / 2, w13s_bytes = kE * 2 * kI * kK / 32;
  const size_t w2_bytes = kE * kN * kI / 2, w2s_bytes = kE * kN * kI / 32;
  CHECK_CUDA(cudaMalloc(&w13, w13_bytes));
  CHECK_CUDA(cudaMalloc(&w13s, w13s_bytes));
  CHECK_CUDA(cudaMalloc(&w2, w2_bytes));
  CHECK_CUDA(cudaMalloc(&w2s, w2s_bytes));
  FillBytes(w13, w13_bytes, 1, 0);
  FillBytes(w13s, w13s_bytes, 2, 1);
  FillBytes(w2, w2_bytes, 3, 0);
  FillBytes(w2s, w2s_bytes, 4, 1);
  void *x, *xd, *out_gu, *out_sw, *out_dn, *out_w;
  CHECK_CUDA(cudaMalloc(&x, max_t * kK * 2));
  CHECK_CUDA(cudaMalloc(&xd, max_t * kTopK * kI * 2));
  CHECK_CUDA(cudaMalloc(&out_gu, max_t * kTopK * 2 * kI * 2));
  CHECK_CUDA(cudaMalloc(&out_sw, max_t * kTopK * kI * 2));
  CHECK_CUDA(cudaMalloc(&out_dn, max_t * kTopK * kN * 2));
  CHECK_CUDA(cudaMalloc(&out_w, max_t * kN * 2));
  FillBytes(x, max_t * kK * 2, 5, 2);
  FillBytes(xd, max_t * kTopK * kI * 2, 6, 2);
  int32_t* ids;
  float* wts;
  CHECK_CUDA(cudaMalloc(&ids, max_t * kTopK * 4));
  CHECK_CUDA(cudaMalloc(&wts, max_t * kTopK * 4));

  std::printf("\n%s, %d SMs; Kimi-K3 TP8 shard E=%lld K=%lld I=%lld N=%lld top-%lld; CUDA-graph timed\n\n",
              prop.name, prop.multiProcessorCount, static_cast<long long>(kE), static_cast<long long>(kK),
              static_cast<long long>(kI), static_cast<long long>(kN), static_cast<long long>(kTopK));
  bench::PrintCeilings(ceil);
  std::printf("| T | rows | experts hit | projection | kernel | us | TFLOP/s | weight+act GB/s | roofline us | bound "
              "| of roofline |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  std::mt19937_64 rng(11);
  for (int64_t T : token_counts) {
    HostTensor hid(DType::kInt32, {T, kTopK});
    std::vector<int32_t> all(kE);
    std::iota(all.begin(), all.end(), 0);
    std::set<int32_t> hit;
    for (int64_t t = 0; t < T; ++t) {
      std::shuffle(all.begin(), all.end(), rng);
      for (int64_t r = 0; r < kTopK; ++r) {
        hid.data<int32_t>()[t * kTopK + r] = all[r];
        hit.insert(all[r]);
      }
    }
    std::vector<float> hw(T * kTopK, 1.f / kTopK);
    CHECK_CUDA(cudaMemcpy(ids, hid.bytes(), T * kTopK * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(wts, hw.data(), T * kTopK * 4, cudaMemcpyHostToDevice));
    const int64_t rows = T * kTopK;
    const int reps = T <= 64 ? 20 : 2;
    struct Proj {
      const char* name;
      BenchOp op;
      MoeStage stage;
      bool swiglu, weighted;
      void* out;
      double flops, bytes;
    };
    const double nh = static_cast<double>(hit.size());
    const Proj projs[] = {
        {"gate/up", BenchOp::kMoeGateUp, MoeStage::kGateUp, false, false, out_gu, 2.0 * rows * kK * 2 * kI,
         nh * 2 * kI * kK * (0.5 + 1.0 / 32) + T * kK * 2.0 + rows * 2 * kI * 2.0},
        {"gate/up+SwiGLU", BenchOp::kMoeGateUp, MoeStage::kGateUp, true, false, out_sw, 2.0 * rows * kK * 2 * kI,
         nh * 2 * kI * kK * (0.5 + 1.0 / 32) + T * kK * 2.0 + rows * kI * 2.0},
        {"down", BenchOp::kMoeDown, MoeStage::kDown, false, false, out_dn, 2.0 * rows * kI * kN,
         nh * kN * kI * (0.5 + 1.0 / 32) + rows * kI * 2.0 + rows * kN * 2.0},
        {"down+weighted sum", BenchOp::kMoeDown, MoeStage::kDown, false, true, out_w, 2.0 * rows * kI * kN,
         nh * kN * kI * (0.5 + 1.0 / 32) + rows * kI * 2.0 + T * kN * 2.0},
        {"layer", BenchOp::kMoeLayer, MoeStage::kLayer, true, true, out_w, 2.0 * rows * kK * 3 * kI,
         nh * 3 * kI * kK * (0.5 + 1.0 / 32) + T * kK * 2.0 + T * kN * 2.0},
    };
    double parts_us = 0;  // the default rows of gate/up+SwiGLU and down+weighted sum
    auto kept = [](const std::vector<std::string>& only, const char* name) {
      return only.empty() || std::find(only.begin(), only.end(), name) != only.end();
    };
    for (const Proj& pr : projs) {
      if (!kept(only_proj, pr.name)) continue;
      MoeParams p;
      p.stage = pr.stage;
      p.swiglu = pr.swiglu;
      p.weighted_sum = pr.weighted;
      const bool gu = pr.stage != MoeStage::kDown;  // reads x [T, K] and W13
      const bool dn = pr.stage != MoeStage::kGateUp;
      const TensorDesc xdsc{DType::kBf16, {gu ? T : rows, gu ? kK : kI}};
      const TensorDesc wd{DType::kFp32, {T, kTopK}};
      const TensorDesc w13d{DType::kFp4E2M1, {kE, 2 * kI, kK}}, w13sd{DType::kE8M0, {kE, 2 * kI, kK / 32}};
      const TensorDesc w2d{DType::kFp4E2M1, {kE, kN, kI}}, w2sd{DType::kE8M0, {kE, kN, kI / 32}};
      const absl::Status vs = p.Validate(xdsc, hid, pr.weighted ? &wd : nullptr, gu ? &w13d : nullptr,
                                         gu ? &w13sd : nullptr, dn ? &w2d : nullptr, dn ? &w2sd : nullptr);
      if (!vs.ok()) {
        std::fprintf(stderr, "validate: %s\n", vs.ToString().c_str());
        return 1;
      }
      MoeInputs in;
      in.x = TensorView{xdsc, gu ? x : xd};
      in.topk_ids = TensorView{hid.desc(), ids};
      in.topk_weights = TensorView{wd, wts};
      in.w13 = TensorView{w13d, w13};
      in.w13_scales = TensorView{w13sd, w13s};
      in.w2 = TensorView{w2d, w2};
      in.w2_scales = TensorView{w2sd, w2s};
      OpCall call;
      call.op = pr.op;
      call.moe = p;
      call.moe_in = in;
      struct Variant {
        std::string name;
        absl::Status (*run)(const OpCall&, TensorView&, cudaStream_t);  // nullptr: dispatch
      };
      std::vector<Variant> variants = {{"default", nullptr}};
      for (const gpu::KernelVariant& v : gpu::MoeVariants()) {
        if (v.unsupported(*caps, call).empty()) variants.push_back({v.name, v.run});
      }
      for (const Variant& v : variants) {
        if (!kept(only_var, v.name.c_str())) continue;
        std::vector<bench::StreamCall> calls;
        for (int r = 0; r < reps; ++r) {
          calls.push_back([&caps, call, pr, v](cudaStream_t s) {
            TensorView ov{call.moe.OutputDesc(), pr.out};
            if (v.run != nullptr) return v.run(call, ov, s);
            return gpu::RunSelected(gpu::MoeVariants(), "moe", *caps, call, ov, s);
          });
        }
        const double us = TimeGraph(calls);
        const bool is_default = v.run == nullptr;
        if (is_default && (pr.swiglu || pr.weighted) && pr.stage != MoeStage::kLayer) parts_us += us;
        std::string proj = pr.name;
        if (pr.stage == MoeStage::kLayer && is_default) {
          char buf[64];
          std::snprintf(buf, sizeof(buf), " (parts %.1f)", parts_us);
          proj += buf;
        }
        const double roof = ceil.RooflineUs(pr.bytes, pr.flops);
        std::printf("| %lld | %lld | %zu | %s | %s | %.1f | %.1f | %.0f | %.1f | %s | %.0f %% |\n",
                    static_cast<long long>(T), static_cast<long long>(rows), hit.size(), proj.c_str(),
                    v.name.c_str(), us, pr.flops / us / 1e6, pr.bytes / us / 1e3, roof, ceil.Bound(pr.bytes, pr.flops),
                    100.0 * roof / us);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace kernelserve

int main(int argc, char** argv) { return kernelserve::Main(argc, argv); }
