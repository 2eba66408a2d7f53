// The cuda worker's memory: inputs and the output in device memory of this
// worker's own CUDA context (a fault poisons that context only), the output
// bracketed by canary blocks checked after every batch of launches; device
// events time the launches on the worker's stream. A device-side fault
// (an illegal address) surfaces as the stream's error and fails the job
// with the CUDA error's name.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/user_kernels/worker_memory.h"

namespace kernelserve {
namespace user_kernels {
namespace {

constexpr uint8_t kCanary = 0xA5;
constexpr size_t kCanaryBytes = 64 << 10;

absl::Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::AbortedError(absl::StrCat(what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e),
                                         "): the kernel faulted on the device or left an error"));
}

class CudaMemory : public WorkerMemory {
 public:
  explicit CudaMemory(int device) {
    init_ = CudaStatus(cudaSetDevice(device), "cudaSetDevice");
    if (init_.ok()) init_ = CudaStatus(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~CudaMemory() override {
    for (void* p : allocs_) cudaFree(p);
  }
  absl::StatusOr<const void*> Input(const std::string& name, const void* bytes, size_t n) override {
    if (!init_.ok()) return init_;
    void* p = nullptr;
    if (absl::Status st = CudaStatus(cudaMalloc(&p, std::max<size_t>(n, 1)), "cudaMalloc"); !st.ok()) return st;
    allocs_.push_back(p);
    if (absl::Status st = CudaStatus(cudaMemcpy(p, bytes, n, cudaMemcpyHostToDevice), "cudaMemcpy"); !st.ok()) {
      return st;
    }
    return static_cast<const void*>(p);
  }
  absl::StatusOr<void*> Output(size_t bytes) override {
    if (!init_.ok()) return init_;
    bytes_ = bytes;
    void* p = nullptr;
    if (absl::Status st = CudaStatus(cudaMalloc(&p, bytes + 2 * kCanaryBytes), "cudaMalloc"); !st.ok()) return st;
    allocs_.push_back(p);
    base_ = static_cast<uint8_t*>(p);
    if (absl::Status st = CudaStatus(cudaMemset(base_, kCanary, bytes + 2 * kCanaryBytes), "cudaMemset"); !st.ok()) {
      return st;
    }
    return static_cast<void*>(base_ + kCanaryBytes);
  }
  absl::Status Poison() override {
    return CudaStatus(cudaMemset(base_ + kCanaryBytes, 0xFF, bytes_), "cudaMemset");
  }
  absl::Status Check() override {
    if (absl::Status st = CudaStatus(cudaStreamSynchronize(stream_), "after the kernel"); !st.ok()) return st;
    std::vector<uint8_t> before(kCanaryBytes), after(kCanaryBytes);
    if (absl::Status st = CudaStatus(cudaMemcpy(before.data(), base_, kCanaryBytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
        !st.ok()) {
      return st;
    }
    if (absl::Status st = CudaStatus(
            cudaMemcpy(after.data(), base_ + kCanaryBytes + bytes_, kCanaryBytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
        !st.ok()) {
      return st;
    }
    for (size_t i = 0; i < kCanaryBytes; ++i) {
      if (after[i] != kCanary) {
        return absl::AbortedError(
            absl::StrCat("the kernel wrote outside its output: byte ", i, " past its end (canary bytes changed)"));
      }
    }
    for (size_t i = 0; i < kCanaryBytes; ++i) {
      if (before[i] != kCanary) {
        return absl::AbortedError(absl::StrCat("the kernel wrote outside its output: ", kCanaryBytes - i,
                                               " bytes before its start (canary bytes changed)"));
      }
    }
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ReadOutput() override {
    std::string out(bytes_, '\0');
    if (absl::Status st = CudaStatus(cudaMemcpy(out.data(), base_ + kCanaryBytes, bytes_, cudaMemcpyDeviceToHost),
                                     "cudaMemcpy");
        !st.ok()) {
      return st;
    }
    return out;
  }
  void* stream() override { return stream_; }
  absl::StatusOr<double> Time(const std::function<int()>& launch, int n) override {
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    cudaEventRecord(start, stream_);
    for (int i = 0; i < n; ++i) {
      const int rc = launch();
      if (rc != 0) return absl::AbortedError(absl::StrCat("the kernel returned ", rc, " (0 is success)"));
    }
    cudaEventRecord(stop, stream_);
    if (absl::Status st = Check(); !st.ok()) return st;
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    return static_cast<double>(ms);
  }
  std::string Describe() const override { return "device memory of the worker's own CUDA context, canaries"; }

 private:
  absl::Status init_;
  cudaStream_t stream_ = nullptr;
  std::vector<void*> allocs_;
  uint8_t* base_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace

std::unique_ptr<WorkerMemory> MakeWorkerMemory(int device) { return std::make_unique<CudaMemory>(device); }

}  // namespace user_kernels
}  // namespace kernelserve
