// Times the GPU bf16 MHA forward at the seed shapes with CUDA events and
// prints TFLOP/s (causal counts only unmasked query-key pairs). Inputs are
// random bf16 (never zeros: zeros can run faster than real data).
//
//   attention_cuda_bench [--iters=N] [--warmup=N] [--dims=128,64] [--only=NAME] [--shapes=B:H:S,...]
//                        [--dense_tail=auto|off|on|N] [--causal_order=sections|per_head]
//                        [--causal=both|no|yes]
// For each head dim in turn (default 128, then 64; --dim=N is --dims=N),
// times every entry of the variant table (attention_variants.h) that serves
// it on this device, or only the one named.
// --dense_tail: the wgmma_ws kernel's dense-tail KV split decided by its cost
// model (auto, the default), never (off), forced on the last wave with as
// many chunks as its idle SMs allow (on) or with N >= 2 chunks;
// --causal_order: causal grids in L2 sections (the default) or one (head,
// batch) after another (per_head). The "tail split" column is the plan the
// launcher computes (ws_plan.h) for wgmma_ws: tail items x chunks, or off.
// --causal: time only the unmasked or only the causal rows (a clock probe
// samples one kind of launch at a time).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/cuda_bench_util.h"
#include "kernels/api/ops.h"
#include "kernels/api/tensor.h"
#include "kernels/api/op_call.h"
#include "kernels/gpu/arch/sm90/attention/ws_plan.h"
#include "kernels/gpu/attention/attention.h"
#include "kernels/gpu/attention/attention_variants.h"
#include "kernels/gpu/common/kernel_variant.h"

namespace kernelserve {
namespace {

struct Shape4 {
  int64_t b, h, s;
};

// Random bf16 in about N(0,1) scale (sum of uniforms), xorshift-fast.
void FillRandom(std::vector<uint16_t>& x, uint64_t seed) {
  uint64_t st = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& e : x) {
    st ^= st << 13;
    st ^= st >> 7;
    st ^= st << 17;
    const float u = (static_cast<int>(st & 0xFFFF) + static_cast<int>((st >> 16) & 0xFFFF) +
                     static_cast<int>((st >> 32) & 0xFFFF) - 3 * 32768) /
                    (32768.f);  // sum of 3 uniforms: mean 0, sd 1
    uint32_t u32;
    std::memcpy(&u32, &u, 4);
    e = static_cast<uint16_t>((u32 + 0x7FFF + ((u32 >> 16) & 1)) >> 16);
  }
}

double Pairs(int64_t sq, int64_t skv, bool causal) {
  if (!causal) return static_cast<double>(sq) * skv;
  double p = 0;
  for (int64_t i = 0; i < sq; ++i) p += std::max<int64_t>(0, std::min(skv, i + skv - sq + 1));
  return p;
}

// The wgmma_ws launcher's plan for a BHSD self-attention shape (one CTA per
// SM, as every instantiation runs): "items x chunks" of the last wave, or
// "off"; "-" for other kernels.
std::string TailSplit(const gpu::KernelVariant& kc, const Shape4& s, int64_t dim, bool causal, int sms,
                      const gpu::attention::WsLaunchOptions& options) {
  if (std::string(kc.name) != "wgmma_ws") return "-";
  gpu::attention::FlashFwdParams p;
  p.batch = static_cast<int>(s.b);
  p.heads_q = p.heads_kv = static_cast<int>(s.h);
  p.group = 1;
  p.seq_q = p.seq_kv = static_cast<int>(s.s);
  p.causal_offset = 0;
  const gpu::attention::WsLaunchPlan l =
      gpu::attention::PlanWsLaunch(p, static_cast<int>(dim), causal, sms, options);
  if (!l.tail.on) return "off";
  return std::to_string(l.tail.tail_items) + " x " + std::to_string(l.tail.splits);
}

int Main(int argc, char** argv) {
  int iters = 20, warmup = 5;
  std::vector<int64_t> dims = {128, 64};
  std::string only;
  std::vector<Shape4> shapes = {{2, 24, 8192}, {1, 32, 16384}, {2, 24, 16384}, {1, 16, 32768}};
  gpu::attention::WsLaunchOptions plan_options;
  std::vector<bool> causal_modes = {false, true};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (const char* v = bench::FlagValue(a, "--causal=")) {
      const std::string m = v;
      if (m == "both") {
        causal_modes = {false, true};
      } else if (m == "no") {
        causal_modes = {false};
      } else if (m == "yes") {
        causal_modes = {true};
      } else {
        std::fprintf(stderr, "--causal: \"%s\" is not both, no or yes\n", v);
        return 2;
      }
    }
    if (const char* v = bench::FlagValue(a, "--dense_tail=")) {
      const std::string m = v;
      int n = 0;
      if (m == "auto") {
        plan_options.dense_tail = -1;
      } else if (m == "off") {
        plan_options.dense_tail = 0;
      } else if (m == "on") {
        plan_options.dense_tail = 1;
      } else if (absl::SimpleAtoi(m, &n) && n >= 2) {
        plan_options.dense_tail = n;
      } else {
        std::fprintf(stderr, "--dense_tail: \"%s\" is not auto, off, on or a chunk count >= 2\n", v);
        return 2;
      }
    }
    if (const char* v = bench::FlagValue(a, "--causal_order=")) {
      const std::string m = v;
      if (m != "sections" && m != "per_head") {
        std::fprintf(stderr, "--causal_order: \"%s\" is not sections or per_head\n", v);
        return 2;
      }
      plan_options.per_head_causal_order = m == "per_head";
    }
    if (const char* v = bench::FlagValue(a, "--only=")) only = v;
    if (const char* v = bench::FlagValue(a, "--iters=")) iters = std::atoi(v);
    if (const char* v = bench::FlagValue(a, "--warmup=")) warmup = std::atoi(v);
    const char* dv = bench::FlagValue(a, "--dim=");
    if (dv == nullptr) dv = bench::FlagValue(a, "--dims=");
    if (dv != nullptr) {
      dims.clear();
      for (const std::string& item : std::vector<std::string>(absl::StrSplit(dv, ',', absl::SkipEmpty()))) {
        int64_t d = 0;
        if (!absl::SimpleAtoi(item, &d) || d < 1) {
          std::fprintf(stderr, "--dims: \"%s\" is not a positive integer\n", item.c_str());
          return 2;
        }
        dims.push_back(d);
      }
    }
    if (const char* v = bench::FlagValue(a, "--shapes=")) {  // B:H:S,B:H:S,... instead of the seed shapes
      shapes.clear();
      for (const std::string& item : std::vector<std::string>(absl::StrSplit(v, ',', absl::SkipEmpty()))) {
        std::vector<std::string> f = absl::StrSplit(item, ':');
        Shape4 sh{};
        if (f.size() != 3 || !absl::SimpleAtoi(f[0], &sh.b) || !absl::SimpleAtoi(f[1], &sh.h) ||
            !absl::SimpleAtoi(f[2], &sh.s) || sh.b < 1 || sh.h < 1 || sh.s < 1) {
          std::fprintf(stderr, "--shapes: \"%s\" is not B:H:S with positive integers\n", item.c_str());
          return 2;
        }
        shapes.push_back(sh);
      }
    }
  }
  if (!bench::HaveCudaDevice()) {
    std::printf("no CUDA device: nothing to time\n");
    return 0;
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  gpu::SetWgmmaWsPlanOverride(plan_options.dense_tail, plan_options.per_head_causal_order);
  std::printf("dense_tail %s, causal order %s\n",
              plan_options.dense_tail < 0    ? "auto"
              : plan_options.dense_tail == 0 ? "off"
              : plan_options.dense_tail == 1 ? "on"
                                             : std::to_string(plan_options.dense_tail).c_str(),
              plan_options.per_head_causal_order ? "per_head" : "sections");

  int64_t max_elems = 0;
  for (const auto& s : shapes) {
    for (int64_t dim : dims) max_elems = std::max(max_elems, s.b * s.h * s.s * dim);
  }
  std::vector<uint16_t> host(max_elems);
  void *q, *k, *v, *o;
  CHECK_CUDA(cudaMalloc(&q, max_elems * 2));
  CHECK_CUDA(cudaMalloc(&k, max_elems * 2));
  CHECK_CUDA(cudaMalloc(&v, max_elems * 2));
  CHECK_CUDA(cudaMalloc(&o, max_elems * 2));
  FillRandom(host, 1);
  CHECK_CUDA(cudaMemcpy(q, host.data(), max_elems * 2, cudaMemcpyHostToDevice));
  FillRandom(host, 2);
  CHECK_CUDA(cudaMemcpy(k, host.data(), max_elems * 2, cudaMemcpyHostToDevice));
  FillRandom(host, 3);
  CHECK_CUDA(cudaMemcpy(v, host.data(), max_elems * 2, cudaMemcpyHostToDevice));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  cudaEvent_t ev0, ev1;
  CHECK_CUDA(cudaEventCreate(&ev0));
  CHECK_CUDA(cudaEventCreate(&ev1));

  auto caps = gpu::QueryDeviceCaps(0);
  if (!caps.ok()) {
    std::fprintf(stderr, "%s\n", caps.status().ToString().c_str());
    return 1;
  }
  // Per head dim, the table's entries that serve it here (the predicates
  // read the device and the head dim only).
  std::vector<std::pair<int64_t, const gpu::KernelVariant*>> runs;
  for (int64_t dim : dims) {
    OpCall probe;
    probe.attention.head_dim = dim;
    for (const gpu::KernelVariant& v : gpu::AttentionVariants()) {
      if (!only.empty() && only != v.name) continue;
      const std::string no = v.unsupported(*caps, probe);
      if (no.empty()) {
        runs.emplace_back(dim, &v);
      } else {
        std::printf("%s: d%lld not timed (%s)\n", v.name, static_cast<long long>(dim), no.c_str());
      }
    }
  }
  if (runs.empty()) {
    std::fprintf(stderr, "no table entry to time (--only=%s)\n", only.c_str());
    return 1;
  }
  std::printf(
      "\n| kernel | (B, H, S) | d | causal | tail split | ms (median) | TFLOP/s |\n"
      "| --- | --- | --- | --- | --- | --- | --- |\n");
  for (const auto& [dim, kc] : runs) {
    for (const auto& s : shapes) {
      for (bool causal : causal_modes) {
        AttentionParams p;
        p.layout = Layout::kBhsd;
        p.causal = causal;
        const TensorDesc desc{DType::kBf16, {s.b, s.h, s.s, dim}};
        if (!p.Validate(desc, desc, desc).ok()) return 1;
        OpCall call;
        call.op = BenchOp::kAttention;
        call.attention = p;
        call.q = TensorView{desc, q};
        call.k = TensorView{desc, k};
        call.v = TensorView{desc, v};
        TensorView to{desc, o};
        std::vector<float> ms;
        for (int it = 0; it < warmup + iters; ++it) {
          CHECK_CUDA(cudaEventRecord(ev0, stream));
          const absl::Status st = kc->run(call, to, stream);
          if (!st.ok()) {
            std::fprintf(stderr, "attention (%s) failed: %s\n", kc->name, st.ToString().c_str());
            return 1;
          }
          CHECK_CUDA(cudaEventRecord(ev1, stream));
          CHECK_CUDA(cudaEventSynchronize(ev1));
          float t = 0;
          CHECK_CUDA(cudaEventElapsedTime(&t, ev0, ev1));
          if (it >= warmup) ms.push_back(t);
        }
        std::sort(ms.begin(), ms.end());
        const double med = ms[ms.size() / 2];
        const double flops = 4.0 * s.b * s.h * dim * Pairs(s.s, s.s, causal);
        // The output must be finite: a timing of a broken kernel is no timing.
        std::vector<uint16_t> out(std::min<int64_t>(s.b * s.h * s.s * dim, 1 << 20));
        CHECK_CUDA(cudaMemcpy(out.data(), o, out.size() * 2, cudaMemcpyDeviceToHost));
        int64_t nonfinite = 0;
        for (uint16_t b : out) nonfinite += ((b & 0x7F80) == 0x7F80);
        std::printf("| %s | (%lld, %lld, %lld) | %lld | %s | %s | %.3f | %.1f |%s\n", kc->name,
                    static_cast<long long>(s.b), static_cast<long long>(s.h),
                    static_cast<long long>(s.s), static_cast<long long>(dim), causal ? "yes" : "no",
                    TailSplit(*kc, s, dim, causal, prop.multiProcessorCount, plan_options).c_str(), med,
                    flops / (med * 1e-3) / 1e12, nonfinite ? " NON-FINITE OUTPUT" : "");
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace kernelserve

int main(int argc, char** argv) { return kernelserve::Main(argc, argv); }
