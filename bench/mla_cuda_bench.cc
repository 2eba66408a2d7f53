// MLA absorbed decode (a16w8) on the GPU over the seed's (B, S) table, H = 16,
// q_len = 4, paged pool with page size 1 and shuffled slots (and the
// contiguous layout for comparison). Each point is timed as CUDA-graph
// replays; one replay holds several calls over disjoint KV copies so that the
// KV never sits in L2 between calls. TB/s counts the KV bytes plus the Q and
// O bytes once per call. Prints a markdown table: every entry of the variant
// table (kernels/gpu/mla/mla_decode_variants.cc) paged, each in the first KV
// format it serves, then the dispatcher's choice for e4m3fn KV contiguous.
// Every row also gives its roofline, max(bytes / copy, FLOP / GEMM) with both
// ceilings measured in this run, and each time as a fraction of it: at
// H * q_len = 64 query rows per fp8 token the op is compute-bound on the
// H200, so bandwidth alone understates the gap. A second table sweeps
// H in {16, 128} and q_len in {1, 4, 8} for the dispatcher's choice.
//
//   mla_cuda_bench [--shapes=B:S,B:S,...] [--heads=16] [--q_len=4]
//                  [--sweep_shapes=B:S,...] [--no_sweep]
//                  [--only=NAME]   (one table entry, paged: for ncu)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench/cuda_bench_util.h"
#include "bench/roofline.h"
#include "kernels/api/ops.h"
#include "kernels/gpu/common/kernel_variant.h"
#include "kernels/gpu/mla/mla_decode_variants.h"

namespace kernelserve {
namespace {

struct Shape2 {
  int64_t b, s;
};

constexpr DType kKvFormats[] = {DType::kFp8E4M3Fn, DType::kFp8E4M3Fnuz};

void FillRandom(void* dev, size_t bytes, uint64_t seed, bool fp8) {
  std::vector<uint8_t> host = bench::RandomBytes(bytes, 64u << 20, seed);
  // fp8: codes of moderate size, finite in both formats (no 0x80: e4m3fnuz's
  // NaN); bf16: values in [-2, 2).
  if (fp8) {
    for (auto& x : host) {
      x = static_cast<uint8_t>((x & 0x80) | (x % 0x58));
      if (x == 0x80) x = 0;
    }
  } else {
    uint16_t* h = reinterpret_cast<uint16_t*>(host.data());
    for (size_t i = 0; i < host.size() / 2; ++i) h[i] = static_cast<uint16_t>(0x3F80 | (h[i] & 0x807F)) ^ (i & 1 ? 0x0080 : 0);
  }
  bench::CopyRepeated(dev, bytes, host);
}

// The first KV format `v` serves on `caps`, or kInvalid.
DType FirstServedFormat(const gpu::KernelVariant& v, const gpu::DeviceCaps& caps) {
  for (DType kv : kKvFormats) {
    MlaDecodeParams p;
    p.kv_dtype = kv;
    if (v.unsupported(caps, gpu::MlaDecodeCall(p, MlaDecodeInputs{})).empty()) return kv;
  }
  return DType::kInvalid;
}

// QK^T over the 576-wide row and PV over its first 512, for the keys each
// draft position sees (position t of q_len attends S - q_len + t + 1 keys).
double MlaFlops(int64_t B, int64_t S, int64_t H, int64_t Q) {
  double keys = 0;
  for (int64_t t = 0; t < Q; ++t) keys += static_cast<double>(S - Q + t + 1);
  return 2.0 * static_cast<double>(B * H) * keys * (kMlaRowDim + kMlaLatentDim);
}

// KV bytes plus Q and O once per call.
double MlaBytes(int64_t B, int64_t S, int64_t H, int64_t Q) {
  return static_cast<double>(B * S) * kMlaRowDim + static_cast<double>(B * Q * H) * (576 + 512) * 2;
}

std::vector<Shape2> ParseShapes(const char* v) {
  std::vector<Shape2> shapes;
  for (const std::string& item : bench::SplitCommas(v)) {
    const size_t colon = item.find(':');
    shapes.push_back({std::atoll(item.substr(0, colon).c_str()), std::atoll(item.substr(colon + 1).c_str())});
  }
  return shapes;
}

// Enough copies of `rows` KV rows for `min_bytes` per replay, each copy a
// shuffled permutation of its own rows of the pool, uploaded to `idx`.
int64_t UploadShuffledSlots(int32_t* idx, int64_t rows, size_t min_bytes, std::mt19937_64& rng) {
  const size_t kvb = static_cast<size_t>(rows) * kMlaRowDim;
  const int64_t copies = std::max<int64_t>(1, (min_bytes + kvb - 1) / kvb);
  std::vector<int32_t> h(rows * copies);
  std::iota(h.begin(), h.end(), 0);
  for (int64_t c = 0; c < copies; ++c) std::shuffle(h.begin() + c * rows, h.begin() + (c + 1) * rows, rng);
  CHECK_CUDA(cudaMemcpy(idx, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
  return copies;
}

struct Result {
  double us = 0;
  int splits = 0;
};

Result TimeOne(const gpu::KernelVariant& kernel, DType kv_dtype, int64_t B, int64_t S, int64_t H, int64_t Q, bool paged,
               uint8_t* kv_pool, size_t pool_bytes, void* q_lat, void* q_pe, void* out, int32_t* d_idx_all,
               int64_t copies) {
  // Host-side validated params, as the server would build them.
  MlaDecodeParams p;
  p.kv_scale = 1.0 / 16;
  HostTensor seq_lens(DType::kInt32, {B});
  for (int64_t b = 0; b < B; ++b) seq_lens.data<int32_t>()[b] = static_cast<int32_t>(S);
  HostTensor indptr(DType::kInt32, {B + 1});
  for (int64_t b = 0; b <= B; ++b) indptr.data<int32_t>()[b] = static_cast<int32_t>(b * S);
  const int64_t rows_per_copy = B * S;
  TensorDesc qd{DType::kBf16, {B, Q, H, kMlaLatentDim}}, pd{DType::kBf16, {B, Q, H, kMlaRopeDim}};
  absl::Status st;
  HostTensor indices;
  if (paged) {
    // Validation over the host index copy costs seconds at B*S = 2.4M; only
    // the descriptor matters here, so validate against a 1-copy view.
    indices = HostTensor(DType::kInt32, {B * S});
    std::vector<int32_t> idx(B * S);
    std::iota(idx.begin(), idx.end(), 0);
    std::copy(idx.begin(), idx.end(), indices.data<int32_t>());
    st = p.Validate(qd, pd, TensorDesc{kv_dtype, {rows_per_copy, kMlaRowDim}}, true, 1, &seq_lens,
                    &indices, &indptr, nullptr);
  } else {
    st = p.Validate(qd, pd, TensorDesc{kv_dtype, {B, S, kMlaRowDim}}, false, 1, nullptr, nullptr,
                    nullptr, nullptr);
  }
  if (!st.ok()) {
    std::fprintf(stderr, "validate: %s\n", st.ToString().c_str());
    std::exit(1);
  }
  int32_t *d_seq, *d_indptr;
  CHECK_CUDA(cudaMalloc(&d_seq, B * 4));
  CHECK_CUDA(cudaMalloc(&d_indptr, (B + 1) * 4));
  CHECK_CUDA(cudaMemcpy(d_seq, seq_lens.bytes(), B * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(d_indptr, indptr.bytes(), (B + 1) * 4, cudaMemcpyHostToDevice));

  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int64_t c = 0; c < copies; ++c) {
    MlaDecodeInputs in;
    in.q_lat = TensorView{qd, q_lat};
    in.q_pe = TensorView{pd, q_pe};
    TensorView ov{p.OutputDesc(), out};
    if (paged) {
      // Copy c uses its own shuffled slot list into the pool.
      in.kv = TensorView{TensorDesc{kv_dtype, {static_cast<int64_t>(pool_bytes / kMlaRowDim), kMlaRowDim}},
                         kv_pool};
      in.seq_lens = TensorView{seq_lens.desc(), d_seq};
      in.kv_indptr = TensorView{indptr.desc(), d_indptr};
      in.kv_indices = TensorView{indices.desc(), d_idx_all + c * rows_per_copy};
    } else {
      in.kv = TensorView{TensorDesc{kv_dtype, {B, S, kMlaRowDim}}, kv_pool + c * rows_per_copy * kMlaRowDim};
    }
    const absl::Status rs = kernel.run(gpu::MlaDecodeCall(p, in), ov, stream);
    if (!rs.ok()) {
      std::fprintf(stderr, "run: %s\n", rs.ToString().c_str());
      std::exit(1);
    }
  }
  CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  Result r;
  r.us = bench::MedianGraphMs(exec, stream, 5, 30) * 1000.0 / copies;
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  cudaFree(d_seq);
  cudaFree(d_indptr);
  return r;
}

int Main(int argc, char** argv) {
  std::vector<Shape2> shapes = {{1, 150000}, {2, 150000}, {8, 8192},   {8, 32768},
                                {8, 65536},  {8, 150000}, {16, 150000}, {32, 8192}};
  std::vector<Shape2> sweep_shapes = {{8, 65536}, {8, 150000}};
  constexpr int64_t kSweepHeads[] = {16, 128}, kSweepQLens[] = {1, 4, 8};
  int64_t H = 16, Q = 4;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (const char* v = bench::FlagValue(a, "--only=")) only = v;
    if (const char* v = bench::FlagValue(a, "--heads=")) H = std::atoll(v);
    if (const char* v = bench::FlagValue(a, "--q_len=")) Q = std::atoll(v);
    if (const char* v = bench::FlagValue(a, "--shapes=")) shapes = ParseShapes(v);
    if (const char* v = bench::FlagValue(a, "--sweep_shapes=")) sweep_shapes = ParseShapes(v);
    if (a == "--no_sweep") sweep_shapes.clear();
  }
  if (!bench::HaveCudaDevice()) {
    std::printf("mla_cuda_bench: no CUDA device, nothing to time\n");
    return 0;
  }
  const absl::StatusOr<gpu::DeviceCaps> caps = gpu::QueryDeviceCaps(0);
  if (!caps.ok()) {
    std::fprintf(stderr, "mla_cuda_bench: %s\n", caps.status().ToString().c_str());
    return 1;
  }
  // The table's entries this device runs, each with its KV format; then the
  // dispatcher's choice for e4m3fn KV.
  struct Column {
    const gpu::KernelVariant* v;
    DType kv;
  };
  std::vector<Column> columns;
  for (const gpu::KernelVariant& v : gpu::MlaDecodeVariants()) {
    if (!only.empty() && only != v.name) continue;
    const DType kv = FirstServedFormat(v, *caps);
    if (kv == DType::kInvalid) {
      std::printf("mla_cuda_bench: %s does not run on this device\n", v.name);
      continue;
    }
    columns.push_back({&v, kv});
  }
  if (!only.empty() && columns.empty()) {
    std::fprintf(stderr, "mla_cuda_bench: no runnable table entry named %s\n", only.c_str());
    return 1;
  }
  MlaDecodeParams probe;
  probe.kv_dtype = DType::kFp8E4M3Fn;
  const absl::StatusOr<const gpu::KernelVariant*> chosen =
      gpu::SelectVariant(gpu::MlaDecodeVariants(), "mla_decode", *caps, gpu::MlaDecodeCall(probe, MlaDecodeInputs{}));
  if (!chosen.ok()) {
    std::fprintf(stderr, "mla_cuda_bench: %s\n", chosen.status().ToString().c_str());
    return 1;
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  // At least ~3x the L2 of KV per replay: small shapes rotate over copies.
  const size_t kMinBytes = 3 * static_cast<size_t>(prop.l2CacheSize);
  size_t pool_bytes = 0;
  int64_t max_rows = 0, max_bh = 0;
  std::vector<Shape2> all_shapes = shapes;
  if (only.empty()) all_shapes.insert(all_shapes.end(), sweep_shapes.begin(), sweep_shapes.end());
  const int64_t max_h = std::max<int64_t>(H, only.empty() && !sweep_shapes.empty() ? 128 : 0);
  const int64_t max_q = std::max<int64_t>(Q, only.empty() && !sweep_shapes.empty() ? 8 : 0);
  for (const auto& sh : all_shapes) {
    const size_t kvb = static_cast<size_t>(sh.b * sh.s) * kMlaRowDim;
    const int64_t copies = std::max<int64_t>(1, (kMinBytes + kvb - 1) / kvb);
    pool_bytes = std::max(pool_bytes, kvb * copies);
    max_rows = std::max(max_rows, sh.b * sh.s * copies);
    max_bh = std::max(max_bh, sh.b);
  }
  uint8_t* kv;
  void *q_lat, *q_pe, *out;
  int32_t* idx;
  CHECK_CUDA(cudaMalloc(&kv, pool_bytes));
  FillRandom(kv, pool_bytes, 1, true);
  const size_t qlat_bytes = max_bh * max_q * max_h * kMlaLatentDim * 2,
               qpe_bytes = max_bh * max_q * max_h * kMlaRopeDim * 2;
  CHECK_CUDA(cudaMalloc(&q_lat, qlat_bytes));
  CHECK_CUDA(cudaMalloc(&q_pe, qpe_bytes));
  CHECK_CUDA(cudaMalloc(&out, qlat_bytes));
  FillRandom(q_lat, qlat_bytes, 2, false);
  FillRandom(q_pe, qpe_bytes, 3, false);
  CHECK_CUDA(cudaMalloc(&idx, max_rows * 4));

  const bench::Ceilings ceil = bench::MeasureCeilings();
  std::printf("\n%s, %d SMs, L2 %d MB; H = %lld, q_len = %lld, CUDA-graph timed\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20, static_cast<long long>(H), static_cast<long long>(Q));
  bench::PrintCeilings(ceil);
  std::printf("\n");
  if (only.empty()) {
    std::string head = "| (B, S) | KV (MB) | roofline (us) | bound |", rule = "| --- | --- | --- | --- |";
    for (const Column& col : columns) {
      head += std::string(" ") + col.v->name + " " + DTypeName(col.kv) + " paged p1 (us) | TB/s | of roofline |";
      rule += " --- | --- | --- |";
    }
    head += std::string(" ") + (*chosen)->name + " " + DTypeName(DType::kFp8E4M3Fn) +
            " contiguous (us) | TB/s | of roofline |";
    rule += " --- | --- | --- |";
    std::printf("%s\n%s\n", head.c_str(), rule.c_str());
  }
  std::mt19937_64 rng(7);
  for (const auto& sh : shapes) {
    const int64_t B = sh.b, S = sh.s;
    const size_t kvb = static_cast<size_t>(B * S) * kMlaRowDim;
    const int64_t copies = UploadShuffledSlots(idx, B * S, kMinBytes, rng);
    const double bytes = MlaBytes(B, S, H, Q), flops = MlaFlops(B, S, H, Q);
    const double roof = ceil.RooflineUs(bytes, flops);
    if (!only.empty()) {
      const Result r =
          TimeOne(*columns[0].v, columns[0].kv, B, S, H, Q, true, kv, pool_bytes, q_lat, q_pe, out, idx, copies);
      std::printf("%s (%lld, %lld) paged: %.1f us\n", only.c_str(), static_cast<long long>(B),
                  static_cast<long long>(S), r.us);
      continue;
    }
    std::printf("| (%lld, %lld) | %.0f | %.1f | %s |", static_cast<long long>(B), static_cast<long long>(S), kvb / 1e6,
                roof, ceil.Bound(bytes, flops));
    for (const Column& col : columns) {
      const Result r = TimeOne(*col.v, col.kv, B, S, H, Q, true, kv, pool_bytes, q_lat, q_pe, out, idx, copies);
      std::printf(" %.1f | %.2f | %.0f %% |", r.us, bytes / r.us / 1e6, 100 * roof / r.us);
    }
    const Result rc = TimeOne(**chosen, DType::kFp8E4M3Fn, B, S, H, Q, false, kv, pool_bytes, q_lat, q_pe, out, idx,
                              copies);
    std::printf(" %.1f | %.2f | %.0f %% |\n", rc.us, bytes / rc.us / 1e6, 100 * roof / rc.us);
    std::fflush(stdout);
  }
  if (!only.empty() || sweep_shapes.empty()) return 0;

  // Heads and draft lengths: the dispatcher's choice, e4m3fn KV, paged p1.
  std::printf("\n| H | q_len | (B, S) | roofline (us) | bound | %s (us) | TFLOP/s | TB/s | of roofline |\n",
              (*chosen)->name);
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (const int64_t h : kSweepHeads) {
    for (const int64_t q : kSweepQLens) {
      for (const auto& sh : sweep_shapes) {
        const int64_t B = sh.b, S = sh.s;
        const int64_t copies = UploadShuffledSlots(idx, B * S, kMinBytes, rng);
        const double bytes = MlaBytes(B, S, h, q), flops = MlaFlops(B, S, h, q);
        const double roof = ceil.RooflineUs(bytes, flops);
        const Result r = TimeOne(**chosen, DType::kFp8E4M3Fn, B, S, h, q, true, kv, pool_bytes, q_lat, q_pe, out, idx,
                                 copies);
        std::printf("| %lld | %lld | (%lld, %lld) | %.1f | %s | %.1f | %.0f | %.2f | %.0f %% |\n",
                    static_cast<long long>(h), static_cast<long long>(q), static_cast<long long>(B),
                    static_cast<long long>(S), roof, ceil.Bound(bytes, flops), r.us, flops / r.us / 1e6,
                    bytes / r.us / 1e6, 100 * roof / r.us);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace kernelserve

int main(int argc, char** argv) { return kernelserve::Main(argc, argv); }
