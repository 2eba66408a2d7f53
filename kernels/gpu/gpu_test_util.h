// Helpers for the CUDA kernel tests: device presence, device buffers, fresh
// seeds, output checks and CUDA-graph replays. Test-only.
#ifndef KERNELSERVE_KERNELS_CUDA_CUDA_TEST_UTIL_H_
#define KERNELSERVE_KERNELS_CUDA_CUDA_TEST_UTIL_H_

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "kernels/api/tensor.h"

namespace kernelserve {
namespace gpu_test {

// Empty when a device answers, else the reason to skip.
inline std::string NoDeviceReason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return std::string("no CUDA device: ") + cudaGetErrorString(e);
  if (n == 0) return "no CUDA device";
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess || prop.major < 9) {
    return "needs a compute capability 9.x device";
  }
  return "";
}

#define KS_SKIP_WITHOUT_CUDA()                                        \
  do {                                                                \
    const std::string reason = ::kernelserve::gpu_test::NoDeviceReason(); \
    if (!reason.empty()) GTEST_SKIP() << reason;                      \
  } while (0)

#define KS_CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << cudaGetErrorString(expr)

// A device copy of a host tensor (or an uninitialized one of a descriptor).
class DeviceTensor {
 public:
  DeviceTensor() = default;
  explicit DeviceTensor(const TensorDesc& desc) : desc_(desc) {
    bytes_ = static_cast<size_t>(desc.num_bytes());
    if (cudaMalloc(&data_, bytes_ == 0 ? 1 : bytes_) != cudaSuccess) data_ = nullptr;
  }
  explicit DeviceTensor(const HostTensor& h) : DeviceTensor(h.desc()) {
    if (data_ != nullptr) cudaMemcpy(data_, h.bytes(), bytes_, cudaMemcpyHostToDevice);
  }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  DeviceTensor(DeviceTensor&& o) noexcept { *this = std::move(o); }
  DeviceTensor& operator=(DeviceTensor&& o) noexcept {
    std::swap(desc_, o.desc_);
    std::swap(data_, o.data_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~DeviceTensor() {
    if (data_ != nullptr) cudaFree(data_);
  }
  TensorView view() const { return TensorView{desc_, data_}; }
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  // Fills every byte with `b` (0xFF makes bf16/fp32 NaN: poison).
  cudaError_t Fill(uint8_t b) { return cudaMemset(data_, b, bytes_); }
  HostTensor ToHost() const {
    HostTensor h(desc_.dtype, desc_.shape);
    cudaMemcpy(h.bytes(), data_, bytes_, cudaMemcpyDeviceToHost);
    return h;
  }

 private:
  TensorDesc desc_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

inline bool SameBytes(const HostTensor& a, const HostTensor& b) {
  return a.num_bytes() == b.num_bytes() && std::memcmp(a.bytes(), b.bytes(), a.num_bytes()) == 0;
}

// A seed no earlier run used, printed so that a failure can be replayed.
inline uint64_t FreshSeed() {
  std::random_device rd;
  const uint64_t s = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  std::printf("seed %llu\n", static_cast<unsigned long long>(s));
  return s;
}

// NaN outputs: the 0xFF poison left unwritten, or a kernel's NaN.
inline int64_t CountNan(const std::vector<double>& v) {
  int64_t nan = 0;
  for (double x : v) nan += std::isnan(x) ? 1 : 0;
  return nan;
}

// Captures `call` on a fresh non-blocking stream into a CUDA graph, launches
// the graph `launches` times and waits for it. Fails fatally inside: call it
// through ASSERT_NO_FATAL_FAILURE.
inline void CaptureAndReplay(const std::function<absl::Status(cudaStream_t)>& call, int launches) {
  cudaStream_t stream;
  KS_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  KS_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const absl::Status st = call(stream);
  KS_CUDA_OK(cudaStreamEndCapture(stream, &graph));
  ASSERT_TRUE(st.ok()) << st;
  cudaGraphExec_t exec;
  KS_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < launches; ++i) KS_CUDA_OK(cudaGraphLaunch(exec, stream));
  KS_CUDA_OK(cudaStreamSynchronize(stream));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

}  // namespace gpu_test
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_CUDA_CUDA_TEST_UTIL_H_
