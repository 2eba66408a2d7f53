// Helpers shared by the CUDA benches: error checks, random device fills,
// CUDA-graph timing and flag parsing. Benches exit on any CUDA error: a
// timing taken after a failed call is no timing.
#ifndef KERNELSERVE_BENCH_CUDA_BENCH_UTIL_H_
#define KERNELSERVE_BENCH_CUDA_BENCH_UTIL_H_

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "bench/bench_util.h"

#define CHECK_CUDA(x)                                                                         \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

namespace kernelserve {
namespace bench {

// True when a CUDA device is there to time on.
inline bool HaveCudaDevice() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// min(bytes, max_chunk) bytes, one mt19937_64 draw each (low byte).
inline std::vector<uint8_t> RandomBytes(size_t bytes, size_t max_chunk, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> host(std::min(bytes, max_chunk));
  for (auto& x : host) x = static_cast<uint8_t>(rng());
  return host;
}

// Fills `bytes` of device memory by repeating `pattern` (large buffers
// repeat a chunk: generating all of it on the host would dominate the run).
inline void CopyRepeated(void* dev, size_t bytes, const std::vector<uint8_t>& pattern) {
  for (size_t off = 0; off < bytes; off += pattern.size()) {
    CHECK_CUDA(cudaMemcpy(static_cast<uint8_t*>(dev) + off, pattern.data(), std::min(pattern.size(), bytes - off),
                          cudaMemcpyHostToDevice));
  }
}

// Median of `iters` timed launches of `exec` on `stream` after `warmup`
// untimed ones, in ms.
inline double MedianGraphMs(cudaGraphExec_t exec, cudaStream_t stream, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) CHECK_CUDA(cudaGraphLaunch(exec, stream));
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int i = 0; i < iters; ++i) {
    CHECK_CUDA(cudaEventRecord(e0, stream));
    CHECK_CUDA(cudaGraphLaunch(exec, stream));
    CHECK_CUDA(cudaEventRecord(e1, stream));
    CHECK_CUDA(cudaEventSynchronize(e1));
    float t;
    CHECK_CUDA(cudaEventElapsedTime(&t, e0, e1));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return ms[ms.size() / 2];
}

using StreamCall = std::function<absl::Status(cudaStream_t)>;

// Runs `calls` once un-captured (a failing status ends the bench), then
// captures them into one graph and returns the median replay time per call,
// in us.
inline double TimeGraphUs(const std::vector<StreamCall>& calls, int warmup, int iters) {
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (const auto& c : calls) {
    const absl::Status st = c(stream);
    if (!st.ok()) {
      std::fprintf(stderr, "call: %s\n", st.ToString().c_str());
      std::exit(1);
    }
  }
  CHECK_CUDA(cudaStreamSynchronize(stream));
  cudaGraph_t graph;
  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (const auto& c : calls) (void)c(stream);
  CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  const double ms = MedianGraphMs(exec, stream, warmup, iters);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  return ms * 1e3 / calls.size();
}

// "a,b,c" -> {"a", "b", "c"}; empty text gives no items.
inline std::vector<std::string> SplitCommas(const std::string& s) {
  std::vector<std::string> items;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t comma = s.find(',', pos);
    if (comma == std::string::npos) comma = s.size();
    items.push_back(s.substr(pos, comma - pos));
    pos = comma + 1;
  }
  return items;
}

}  // namespace bench
}  // namespace kernelserve

#endif  // KERNELSERVE_BENCH_CUDA_BENCH_UTIL_H_
