// FP8 attention (ZYFA numerics) on the GPU: B = 1, H = 16, S = 16384 (and
// --seq=..., --heads=...), (d_qk, d_v) = (128, 128) and (192, 128), causal
// and not, exact / lean / naive P. Times the attention kernel on FP8 inputs
// (descales given) and the whole call on bf16 inputs (GPU quantization
// included), as CUDA-graph replays, median of 10. TFLOP/s counts
// 2 * (d_qk + d_v) per visible (query, key) pair; "of peak" is the fp8 time's
// rate over the FP8 GEMM rate measured on the H200 (1420 TFLOP/s, bench/NOTES.md).
// Prints a markdown table; "out hash" fingerprints the fp8-in output's bytes,
// so that two builds of a change that keeps the numerics can be compared.
//
// --issue: issue 15's shapes instead, the ones bench/peers.py times for
// cuDNN bf16 in the same call: (B, H, S) = (1, 32, 16384), (2, 24, 16384),
// (1, 16, 32768) at (128, 128) and (1, 16, 16384) at (192, 128).
// --modes=lean,exact,naive: the P modes to time (default all).
// --format=e4m3fnuz: MI300X's format (served through e4m3fn: the codes are
// converted before the kernel, and that pass is in both times).
//
// Times every entry of the variant table (fp8_attention_variants.h) on the
// head shapes it serves on this device, or with --only=NAME the one named.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "bench/cuda_bench_util.h"
#include "kernels/api/ops.h"
#include "kernels/api/op_call.h"
#include "kernels/gpu/common/kernel_variant.h"
#include "kernels/gpu/fp8_attention/fp8_attention_variants.h"

namespace kernelserve {
namespace {

void Fill(void* dev, size_t bytes, uint64_t seed, bool fp8) {
  std::vector<uint8_t> h = bench::RandomBytes(bytes, 16u << 20, seed);
  for (size_t i = 0; i < h.size(); ++i) {
    const uint8_t v = h[i];
    // FP8 codes below 0x70 with a sign, zero unsigned (0x80 is NaN in e4m3fnuz).
    const uint8_t m = static_cast<uint8_t>(v % 0x70);
    h[i] = fp8 ? static_cast<uint8_t>(m ? (v & 0x80) | m : 0) : ((i & 1) ? static_cast<uint8_t>(0x3F | (v & 0x80)) : v);
  }
  bench::CopyRepeated(dev, bytes, h);
}

// One call per graph: 1 warm-up replay, median of 10.
double TimeUs(const bench::StreamCall& call) { return bench::TimeGraphUs({call}, 1, 10); }

// FNV-1a over the n bf16 outputs at `out` (device), 64 bits in hex, with
// " NON-FINITE" appended when any output is Inf or NaN.
std::string OutputHash(const void* out, int64_t n) {
  std::vector<uint16_t> host(n);
  CHECK_CUDA(cudaMemcpy(host.data(), out, n * 2, cudaMemcpyDeviceToHost));
  uint64_t h = 0xcbf29ce484222325ull;
  int64_t nonfinite = 0;
  for (uint16_t x : host) {
    h = (h ^ x) * 0x100000001b3ull;
    nonfinite += (x & 0x7F80) == 0x7F80;
  }
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return std::string(buf) + (nonfinite ? " NON-FINITE" : "");
}

constexpr double kFp8GemmTflops = 1420.0;  // measured on the H200 (bench/NOTES.md)

struct BenchShape {
  int64_t b, h, s;
  int dqk;  // 0: both head shapes
};

int Main(int argc, char** argv) {
  int64_t S = 16384, H = 16, B = 1;
  std::string only, modes = "lean,exact,naive";
  bool issue = false;
  Fp8Format format = Fp8Format::kE4M3Fn;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (const char* v = bench::FlagValue(a, "--seq=")) S = std::atoll(v);
    if (const char* v = bench::FlagValue(a, "--heads=")) H = std::atoll(v);
    if (const char* v = bench::FlagValue(a, "--only=")) only = v;
    if (const char* v = bench::FlagValue(a, "--modes=")) modes = v;
    if (a == "--issue") issue = true;
    if (a == "--format=e4m3fnuz") format = Fp8Format::kE4M3Fnuz;
  }
  if (!bench::HaveCudaDevice()) {
    std::printf("fp8_attention_cuda_bench: no CUDA device, nothing to time\n");
    return 0;
  }
  std::vector<BenchShape> shapes = {{B, H, S, 0}};
  if (issue) shapes = {{1, 32, 16384, 128}, {2, 24, 16384, 128}, {1, 16, 32768, 128}, {1, 16, 16384, 192}};
  size_t rows = 0;
  for (const BenchShape& sh : shapes) rows = std::max(rows, static_cast<size_t>(sh.b * sh.h * sh.s));
  void *q, *k, *v, *out, *qb, *kb, *vb;
  float* ds;
  const size_t nq = rows * 192;
  CHECK_CUDA(cudaMalloc(&q, nq));
  CHECK_CUDA(cudaMalloc(&k, nq));
  CHECK_CUDA(cudaMalloc(&v, nq));
  CHECK_CUDA(cudaMalloc(&qb, nq * 2));
  CHECK_CUDA(cudaMalloc(&kb, nq * 2));
  CHECK_CUDA(cudaMalloc(&vb, nq * 2));
  CHECK_CUDA(cudaMalloc(&out, rows * 128 * 2));
  CHECK_CUDA(cudaMalloc(&ds, 4 * sizeof(float)));
  Fill(q, nq, 1, true);
  Fill(k, nq, 2, true);
  Fill(v, nq, 3, true);
  Fill(qb, nq * 2, 4, false);
  Fill(kb, nq * 2, 5, false);
  Fill(vb, nq * 2, 6, false);
  const float one[4] = {0.01f, 0.01f, 0.01f, 0.01f};
  CHECK_CUDA(cudaMemcpy(ds, one, sizeof(one), cudaMemcpyHostToDevice));
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("\n%s; %s, BHSD, CUDA-graph timed\n\n", prop.name, Fp8FormatName(format).c_str());
  auto caps = gpu::QueryDeviceCaps(0);
  if (!caps.ok()) {
    std::fprintf(stderr, "%s\n", caps.status().ToString().c_str());
    return 1;
  }
  std::printf(
      "| kernel | (B, H, S) | (d_qk, d_v) | causal | P | fp8 in: us | TFLOP/s | of peak | bf16 in (+quant): us | "
      "TFLOP/s | out hash |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  int timed = 0;
  for (const BenchShape& sh : shapes) {
    for (const gpu::KernelVariant& kv : gpu::Fp8AttentionVariants()) {
      if (!only.empty() && only != kv.name) continue;
      for (int dqk : {128, 192}) {
        if (sh.dqk != 0 && sh.dqk != dqk) continue;
        for (bool causal : {true, false}) {
          if (issue && dqk == 192 && !causal) continue;
          for (PMode mode : {PMode::kLean, PMode::kExact, PMode::kNaive}) {
            if (dqk == 192 && mode == PMode::kNaive) continue;
            if (modes.find(PModeName(mode)) == std::string::npos) continue;
            const int64_t b = sh.b, h = sh.h, sq = sh.s;
            const DType fp8 = Fp8FormatDType(format);
            const TensorDesc qd8{fp8, {b, h, sq, dqk}}, vd8{fp8, {b, h, sq, 128}};
            const TensorDesc qd16{DType::kBf16, {b, h, sq, dqk}}, vd16{DType::kBf16, {b, h, sq, 128}};
            const TensorDesc d1{DType::kFp32, {1}};
            Fp8AttentionParams p8;
            p8.causal = causal;
            p8.p_mode = mode;
            p8.format = format;
            if (!p8.Validate(qd8, qd8, vd8, &d1, &d1, &d1).ok()) return 1;
            Fp8AttentionParams p16 = p8;
            if (!p16.Validate(qd16, qd16, vd16, nullptr, nullptr, nullptr).ok()) return 1;
            Fp8AttentionInputs i8, i16;
            i8.q = TensorView{qd8, q};
            i8.k = TensorView{qd8, k};
            i8.v = TensorView{vd8, v};
            i8.q_descale = i8.k_descale = i8.v_descale = TensorView{d1, ds};
            i16.q = TensorView{qd16, qb};
            i16.k = TensorView{qd16, kb};
            i16.v = TensorView{vd16, vb};
            TensorView ov{p8.OutputDesc(), out};
            OpCall c8, c16;
            c8.op = c16.op = BenchOp::kFp8Attention;
            c8.fp8 = p8;
            c8.fp8_in = i8;
            c16.fp8 = p16;
            c16.fp8_in = i16;
            if (!kv.unsupported(*caps, c8).empty()) continue;  // a head shape the entry does not serve
            const double us8 = TimeUs([&](cudaStream_t st) { return kv.run(c8, ov, st); });
            const double us16 = TimeUs([&](cudaStream_t st) { return kv.run(c16, ov, st); });
            // The fp8-in output's bytes, hashed: two builds of a kernel whose
            // change keeps DESIGN's numerics must print the same hash.
            const absl::Status run8 = kv.run(c8, ov, nullptr);
            if (!run8.ok()) {
              std::fprintf(stderr, "%s\n", run8.ToString().c_str());
              return 1;
            }
            const std::string out_hash = OutputHash(out, b * h * sq * 128);
            ++timed;
            const double pairs = causal ? static_cast<double>(sq) * (sq + 1) / 2 : static_cast<double>(sq) * sq;
            const double flops = 2.0 * b * h * pairs * (dqk + 128);
            const double tf8 = flops / us8 / 1e6;
            std::printf("| %s | (%lld, %lld, %lld) | (%d, 128) | %s | %s | %.0f | %.0f | %.2f | %.0f | %.0f | %s |\n",
                        kv.name, static_cast<long long>(b), static_cast<long long>(h), static_cast<long long>(sq),
                        dqk, causal ? "yes" : "no", PModeName(mode).c_str(), us8, tf8, tf8 / kFp8GemmTflops, us16,
                        flops / us16 / 1e6, out_hash.c_str());
            std::fflush(stdout);
          }
        }
      }
    }
  }
  if (timed == 0) {
    std::fprintf(stderr, "no table entry to time (--only=%s)\n", only.c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace kernelserve

int main(int argc, char** argv) { return kernelserve::Main(argc, argv); }
