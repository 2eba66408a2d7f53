// Decode attention over a PER_HEAD_KV pool on the GPU (the CUDA backend's
// kernel, kernels/gpu/decode_attention/) at memory-bound shapes: Hq = 32,
// Hkv = 8, D = 128, B in {1, 8, 32}, S in {4096, 32768}, q_len 1 and 4,
// bf16 and e4m3fn pools, page size 16 with shuffled page order. Each point
// is timed as CUDA-graph replays; one replay holds several calls over
// disjoint parts of the pool (at least 3x the L2 of KV per replay) so the KV
// never sits in L2 between calls. Bytes count the KV read plus Q and O once
// per call. Every row gives its roofline, max(bytes / copy, FLOP / GEMM) with
// both ceilings measured in this run, and our time as a fraction of it.
//
//   decode_attention_cuda_bench [--shapes=B:S,B:S,...] [--q_lens=1,4] [--kv=bf16,fp8_e4m3fn]
//                               [--heads=32:8] [--head_dim=128]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/cuda_bench_util.h"
#include "bench/roofline.h"
#include "kernels/api/ops.h"
#include "kernels/gpu/decode_attention/decode_attention.h"

namespace kernelserve {
namespace {

struct Shape2 {
  int64_t b, s;
};

constexpr int64_t kPage = 16;

std::vector<Shape2> ParseShapes(const std::string& text) {
  std::vector<Shape2> out;
  for (const std::string& item : bench::SplitCommas(text)) {
    const size_t colon = item.find(':');
    if (colon == std::string::npos) {
      std::fprintf(stderr, "decode_attention_cuda_bench: --shapes takes B:S items, got %s\n", item.c_str());
      std::exit(1);
    }
    out.push_back({std::atoll(item.substr(0, colon).c_str()), std::atoll(item.substr(colon + 1).c_str())});
  }
  return out;
}

struct Point {
  DType kv;
  int64_t b, s, q_len;
};

struct Result {
  double us = 0;
  int splits = 0;
};

// Times one point: `copies` calls per replay, call c reading its own pages
// [c * pages_per_copy, (c + 1) * pages_per_copy) of the pool in shuffled order.
Result TimeOne(const Point& pt, int64_t hq, int64_t hkv, int64_t d, uint8_t* pool, int64_t pool_slots, void* q,
               void* out, int64_t copies, std::mt19937_64& rng) {
  const int64_t pages_per_req = (pt.s + kPage - 1) / kPage;
  const int64_t pages_per_copy = pt.b * pages_per_req;
  HostTensor seq_lens(DType::kInt32, {pt.b}), indptr(DType::kInt32, {pt.b + 1}),
      indices(DType::kInt32, {pages_per_copy});
  for (int64_t b = 0; b < pt.b; ++b) seq_lens.data<int32_t>()[b] = static_cast<int32_t>(pt.s);
  for (int64_t b = 0; b <= pt.b; ++b) indptr.data<int32_t>()[b] = static_cast<int32_t>(b * pages_per_req);
  std::vector<int32_t> all(pages_per_copy * copies);
  std::iota(all.begin(), all.end(), 0);
  for (int64_t c = 0; c < copies; ++c) {
    std::shuffle(all.begin() + c * pages_per_copy, all.begin() + (c + 1) * pages_per_copy, rng);
  }
  std::copy(all.begin(), all.begin() + pages_per_copy, indices.data<int32_t>());
  DecodeAttentionParams p;
  p.kv_scale = pt.kv == DType::kBf16 ? 1.0 : 1.0 / 16;
  const TensorDesc qd{DType::kBf16, {pt.b, pt.q_len, hq, d}};
  const TensorDesc pd{pt.kv, {pool_slots, 2 * hkv * d}};
  const absl::Status st = p.Validate(qd, pd, hkv, d, kPage, &seq_lens, &indices, &indptr, nullptr);
  if (!st.ok()) {
    std::fprintf(stderr, "validate: %s\n", st.ToString().c_str());
    std::exit(1);
  }
  int32_t *d_seq, *d_indptr, *d_idx;
  CHECK_CUDA(cudaMalloc(&d_seq, pt.b * 4));
  CHECK_CUDA(cudaMalloc(&d_indptr, (pt.b + 1) * 4));
  CHECK_CUDA(cudaMalloc(&d_idx, all.size() * 4));
  CHECK_CUDA(cudaMemcpy(d_seq, seq_lens.bytes(), pt.b * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(d_indptr, indptr.bytes(), (pt.b + 1) * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(d_idx, all.data(), all.size() * 4, cudaMemcpyHostToDevice));
  std::vector<bench::StreamCall> calls;
  for (int64_t c = 0; c < copies; ++c) {
    calls.push_back([&, c](cudaStream_t stream) {
      DecodeAttentionInputs in;
      in.q = TensorView{qd, q};
      in.kv = TensorView{pd, pool};
      in.seq_lens = TensorView{seq_lens.desc(), d_seq};
      in.kv_indptr = TensorView{indptr.desc(), d_indptr};
      in.kv_indices = TensorView{indices.desc(), d_idx + c * pages_per_copy};
      TensorView ov{p.OutputDesc(), out};
      return gpu::RunDecodeAttention(p, in, ov, stream);
    });
  }
  Result r;
  r.us = bench::TimeGraphUs(calls, 5, 30);
  const absl::StatusOr<gpu::decode::DecodeSplitPlan> plan = gpu::DecodeAttentionPlan(p);
  r.splits = plan.ok() ? plan->splits : -1;
  cudaFree(d_seq);
  cudaFree(d_indptr);
  cudaFree(d_idx);
  return r;
}

int Main(int argc, char** argv) {
  std::vector<Shape2> shapes = {{1, 4096}, {1, 32768}, {8, 4096}, {8, 32768}, {32, 4096}, {32, 32768}};
  std::vector<int64_t> q_lens = {1, 4};
  std::vector<DType> kvs = {DType::kBf16, DType::kFp8E4M3Fn};
  int64_t hq = 32, hkv = 8, d = 128;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (const char* v = bench::FlagValue(a, "--shapes=")) shapes = ParseShapes(v);
    if (const char* v = bench::FlagValue(a, "--q_lens=")) {
      q_lens.clear();
      for (const std::string& s : bench::SplitCommas(v)) q_lens.push_back(std::atoll(s.c_str()));
    }
    if (const char* v = bench::FlagValue(a, "--kv=")) {
      kvs.clear();
      for (const std::string& s : bench::SplitCommas(v)) {
        const absl::StatusOr<DType> t = ParseDType(s);
        if (!t.ok()) {
          std::fprintf(stderr, "decode_attention_cuda_bench: --kv: %s\n", t.status().ToString().c_str());
          return 1;
        }
        kvs.push_back(*t);
      }
    }
    if (const char* v = bench::FlagValue(a, "--heads=")) {  // Hq:Hkv
      hq = std::atoll(v);
      const char* colon = std::strchr(v, ':');
      hkv = colon != nullptr ? std::atoll(colon + 1) : hq;
    }
    if (const char* v = bench::FlagValue(a, "--head_dim=")) d = std::atoll(v);
  }
  if (!bench::HaveCudaDevice()) {
    std::printf("decode_attention_cuda_bench: no CUDA device, nothing to time\n");
    return 0;
  }
  const bench::Ceilings ceil = bench::MeasureCeilings();
  bench::PrintCeilings(ceil);
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  const size_t min_bytes = 3 * static_cast<size_t>(prop.l2CacheSize);
  // One pool for every point, sized for the largest (KV of all copies).
  const int64_t row_elems = 2 * hkv * d;
  size_t pool_bytes = 0;
  int64_t max_b = 0, max_q = 0;
  for (const auto& sh : shapes) {
    const size_t kvb = static_cast<size_t>(sh.b * ((sh.s + kPage - 1) / kPage) * kPage * row_elems * 2);
    pool_bytes = std::max(pool_bytes, kvb * std::max<size_t>(1, (min_bytes + kvb - 1) / kvb));
    max_b = std::max(max_b, sh.b);
  }
  for (int64_t ql : q_lens) max_q = std::max(max_q, ql);
  uint8_t* pool;
  void *q, *out;
  CHECK_CUDA(cudaMalloc(&pool, pool_bytes));
  // Finite codes in every format: as bf16 (little-endian pairs) magnitudes in
  // [0.5, 2); as fp8 bytes, bits 6 and 3 clear (below every NaN and Inf code)
  // and no 0x80 (e4m3fnuz's NaN).
  {
    std::vector<uint8_t> host = bench::RandomBytes(pool_bytes, 64u << 20, 1);
    for (size_t i = 0; i < host.size(); ++i) {
      host[i] = (i & 1) ? static_cast<uint8_t>(0x3F | (host[i] & 0x80)) : static_cast<uint8_t>(host[i] & 0xB7);
      if (host[i] == 0x80) host[i] = 0;
    }
    bench::CopyRepeated(pool, pool_bytes, host);
  }
  const size_t q_bytes = static_cast<size_t>(max_b * max_q * hq * d * 2);
  CHECK_CUDA(cudaMalloc(&q, q_bytes));
  CHECK_CUDA(cudaMemset(q, 0x3C, q_bytes));  // bf16 0x3C3C: ~0.011, finite
  CHECK_CUDA(cudaMalloc(&out, q_bytes));
  std::mt19937_64 rng(3);
  std::printf(
      "\nDecode attention, Hq=%lld Hkv=%lld D=%lld, page %lld shuffled; roofline = max(bytes / copy BW, FLOP / "
      "GEMM)\n\n",
      static_cast<long long>(hq), static_cast<long long>(hkv), static_cast<long long>(d),
      static_cast<long long>(kPage));
  std::printf("| kv | B | S | q_len | splits | us | TB/s | roofline us | bound | of roofline |\n");
  std::printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |\n");
  for (DType kv : kvs) {
    const int64_t elt = NumBytes(kv, 1);
    const int64_t slots = static_cast<int64_t>(pool_bytes / (row_elems * elt));
    for (const auto& sh : shapes) {
      for (int64_t ql : q_lens) {
        const Point pt{kv, sh.b, sh.s, ql};
        const int64_t pages_per_copy = sh.b * ((sh.s + kPage - 1) / kPage);
        const size_t kvb = static_cast<size_t>(pages_per_copy * kPage * row_elems * elt);
        const int64_t copies =
            std::min<int64_t>(std::max<size_t>(1, (min_bytes + kvb - 1) / kvb), slots / (pages_per_copy * kPage));
        const Result r = TimeOne(pt, hq, hkv, d, pool, slots, q, out, copies, rng);
        const double bytes =
            static_cast<double>(sh.b * sh.s * row_elems * elt) + 2.0 * static_cast<double>(sh.b * ql * hq * d * 2);
        double keys = 0;
        for (int64_t t = 0; t < ql; ++t) keys += static_cast<double>(sh.s - ql + t + 1);
        const double flops = 4.0 * static_cast<double>(sh.b * hq * d) * keys;
        const double roof = ceil.RooflineUs(bytes, flops);
        std::printf("| %s | %lld | %lld | %lld | %d | %.1f | %.2f | %.1f | %s | %.0f%% |\n", DTypeName(kv).c_str(),
                    static_cast<long long>(sh.b), static_cast<long long>(sh.s), static_cast<long long>(ql), r.splits,
                    r.us, bytes / (r.us * 1e6), roof, ceil.Bound(bytes, flops), 100.0 * roof / r.us);
      }
    }
  }
  cudaFree(pool);
  cudaFree(q);
  cudaFree(out);
  return 0;
}

}  // namespace
}  // namespace kernelserve

int main(int argc, char** argv) { return kernelserve::Main(argc, argv); }
