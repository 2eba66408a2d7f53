#include "kernels/cuda/cuda_backend.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "kernels/api/status_macros.h"
#include "kernels/cuda/attention/attention_cuda.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/fp8_attention/fp8_attention.h"
#include "kernels/cuda/mla/mla_decode.h"
#include "kernels/cuda/moe/moe.h"
#include "kernels/cuda/gpu_compat.h"

namespace kernelserve {
namespace {

using cuda::GpuStatus;
using cuda::IsStickyError;

// Per-device state. Health is the only mutable part shared between threads.
struct DeviceState {
  DeviceInfo info;
  gpuStream_t stream = nullptr;
  mutable absl::Mutex mu;
  bool healthy ABSL_GUARDED_BY(mu) = true;
  std::string reason ABSL_GUARDED_BY(mu);
};

class CudaMemory : public DeviceMemory {
 public:
  CudaMemory(void* ptr, size_t size, int device) : ptr_(ptr), size_(size), device_(device) {}
  ~CudaMemory() override {
    // Freeing on a faulted context fails harmlessly; nothing to report to.
    if (gpuSetDevice(device_) == gpuSuccess) (void)gpuFree(ptr_);
  }
  void* data() const override { return ptr_; }
  size_t size() const override { return size_; }
  int device() const override { return device_; }

 private:
  void* ptr_;
  size_t size_;
  int device_;
};

class CudaBackend : public Backend {
 public:
  explicit CudaBackend(std::vector<std::unique_ptr<DeviceState>> devices)
      : devices_(std::move(devices)) {}

  ~CudaBackend() override {
    for (auto& d : devices_) {
      if (d->stream != nullptr && gpuSetDevice(d->info.index) == gpuSuccess) {
        (void)gpuStreamDestroy(d->stream);
      }
    }
  }

  std::string Name() const override { return "cuda"; }
  int DeviceCount() const override { return static_cast<int>(devices_.size()); }

  DeviceInfo GetDeviceInfo(int device) const override {
    if (device < 0 || device >= DeviceCount()) {
      DeviceInfo none;
      none.index = device;
      none.backend = "cuda";
      none.healthy = false;
      none.health_reason = "no such device";
      return none;
    }
    const DeviceState& d = *devices_[device];
    DeviceInfo info = d.info;
    absl::MutexLock lock(&d.mu);
    info.healthy = d.healthy;
    info.health_reason = d.reason;
    return info;
  }

  absl::StatusOr<std::unique_ptr<DeviceMemory>> Allocate(int device, size_t bytes) override {
    KS_ASSIGN_OR_RETURN(DeviceState * d, Enter(device));
    if (bytes == 0) bytes = 1;  // a valid, distinct pointer for empty tensors
    void* ptr = nullptr;
    const gpuError_t e = gpuMalloc(&ptr, bytes);
    if (e != gpuSuccess) {
      (void)gpuGetLastError();  // out-of-memory is not sticky; clear it
      return Check(d, e, absl::StrCat("cudaMalloc(", bytes, " bytes) on device ", device));
    }
    return std::unique_ptr<DeviceMemory>(new CudaMemory(ptr, bytes, device));
  }

  absl::Status CopyToDevice(int device, void* dst, const void* src, size_t bytes) override {
    return Copy(device, dst, src, bytes, gpuMemcpyHostToDevice, "copy to device");
  }
  absl::Status CopyToHost(int device, void* dst, const void* src, size_t bytes) override {
    return Copy(device, dst, src, bytes, gpuMemcpyDeviceToHost, "copy to host");
  }
  absl::Status CopyOnDevice(int device, void* dst, const void* src, size_t bytes) override {
    KS_ASSIGN_OR_RETURN(DeviceState * d, Enter(device));
    if (bytes == 0) return absl::OkStatus();
    return Check(d, gpuMemcpyAsync(dst, src, bytes, gpuMemcpyDeviceToDevice, d->stream),
                 "device-to-device copy");
  }

  absl::Status Synchronize(int device) override {
    KS_ASSIGN_OR_RETURN(DeviceState * d, Enter(device));
    return Check(d, gpuStreamSynchronize(d->stream), "stream synchronize");
  }

  absl::Status Attention(int device, const AttentionParams& p, const TensorView& q,
                         const TensorView& k, const TensorView& v, TensorView& out) override {
    KS_ASSIGN_OR_RETURN(DeviceState * d, Enter(device));
    return AfterLaunch(d, cuda::RunAttention(p, q, k, v, out, d->stream));
  }

  absl::Status Fp8Attention(int device, const Fp8AttentionParams& p, const Fp8AttentionInputs& in,
                            TensorView& out) override {
    KS_ASSIGN_OR_RETURN(DeviceState * d, Enter(device));
    return AfterLaunch(d, cuda::RunFp8Attention(p, in, out, d->stream));
  }

  absl::Status MlaDecode(int device, const MlaDecodeParams& p, const MlaDecodeInputs& in,
                         TensorView& out) override {
    KS_ASSIGN_OR_RETURN(DeviceState * d, Enter(device));
    return AfterLaunch(d, cuda::RunMlaDecode(p, in, out, d->stream));
  }

  absl::Status Moe(int device, const MoeParams& p, const MoeInputs& in, TensorView& out) override {
    KS_ASSIGN_OR_RETURN(DeviceState * d, Enter(device));
    return AfterLaunch(d, cuda::RunMoe(p, in, out, d->stream));
  }

 private:
  // Checks the index and health, and makes the device current.
  absl::StatusOr<DeviceState*> Enter(int device) {
    if (device < 0 || device >= DeviceCount()) {
      return absl::InvalidArgumentError(
          absl::StrCat("device: expected 0..", DeviceCount() - 1, ", got ", device));
    }
    DeviceState* d = devices_[device].get();
    {
      absl::MutexLock lock(&d->mu);
      if (!d->healthy) {
        return absl::UnavailableError(
            absl::StrCat("cuda device ", device, " is unhealthy: ", d->reason));
      }
    }
    KS_RETURN_IF_ERROR(Check(d, gpuSetDevice(device), "cudaSetDevice"));
    return d;
  }

  // Turns a CUDA error into a status; a sticky one marks the device unhealthy.
  absl::Status Check(DeviceState* d, gpuError_t e, absl::string_view what) {
    if (e == gpuSuccess) return absl::OkStatus();
    absl::Status s = GpuStatus(e, absl::StrCat(what, " on cuda device ", d->info.index));
    if (IsStickyError(e)) {
      absl::MutexLock lock(&d->mu);
      if (d->healthy) {
        d->healthy = false;
        d->reason = std::string(s.message());
      }
    }
    return s;
  }

  // A launcher's own status (bad arguments) passes through; then any launch
  // error, or a sticky fault from earlier asynchronous work, is picked up.
  absl::Status AfterLaunch(DeviceState* d, absl::Status launched) {
    const gpuError_t e = gpuGetLastError();
    if (e != gpuSuccess) return Check(d, e, "kernel launch");
    if (!launched.ok() && launched.code() == absl::StatusCode::kUnavailable) {
      // The launcher saw a sticky error itself (it returns UNAVAILABLE for those).
      absl::MutexLock lock(&d->mu);
      if (d->healthy) {
        d->healthy = false;
        d->reason = std::string(launched.message());
      }
    }
    return launched;
  }

  absl::Status Copy(int device, void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                    absl::string_view what) {
    KS_ASSIGN_OR_RETURN(DeviceState * d, Enter(device));
    if (bytes == 0) return absl::OkStatus();
    KS_RETURN_IF_ERROR(Check(d, gpuMemcpyAsync(dst, src, bytes, kind, d->stream), what));
    // Host buffers are the caller's: the copy must be complete on return.
    return Check(d, gpuStreamSynchronize(d->stream), what);
  }

  std::vector<std::unique_ptr<DeviceState>> devices_;
};

absl::StatusOr<std::unique_ptr<DeviceState>> OpenDevice(int index, const std::string& driver) {
  auto d = std::make_unique<DeviceState>();
  KS_RETURN_IF_ERROR(GpuStatus(gpuSetDevice(index), "cudaSetDevice"));
  gpuDeviceProp prop;
  KS_RETURN_IF_ERROR(GpuStatus(gpuGetDeviceProperties(&prop, index), "cudaGetDeviceProperties"));
  int clock_khz = 0, mem_clock_khz = 0;
  KS_RETURN_IF_ERROR(GpuStatus(gpuDeviceGetAttribute(&clock_khz, gpuDevAttrClockRate, index),
                               "cudaDeviceGetAttribute(clock rate)"));
  KS_RETURN_IF_ERROR(
      GpuStatus(gpuDeviceGetAttribute(&mem_clock_khz, gpuDevAttrMemoryClockRate, index),
                "cudaDeviceGetAttribute(memory clock rate)"));
  d->info.index = index;
  d->info.backend = "cuda";
  d->info.name = absl::StrCat(prop.name, " (sm_", prop.major, prop.minor, ")");
  d->info.memory_total_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  d->info.compute_units = prop.multiProcessorCount;
  d->info.clock_mhz = clock_khz / 1000;
  d->info.memory_clock_mhz = mem_clock_khz / 1000;
  d->info.driver = driver;
  KS_RETURN_IF_ERROR(GpuStatus(gpuStreamCreateWithFlags(&d->stream, gpuStreamNonBlocking),
                               "cudaStreamCreate"));
  return d;
}

std::string VersionString(int v) { return absl::StrCat(v / 1000, ".", (v % 1000) / 10); }

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend() {
  int count = 0;
  const gpuError_t e = gpuGetDeviceCount(&count);
  if (e != gpuSuccess) {
    (void)gpuGetLastError();
    return absl::UnavailableError(absl::StrCat("no CUDA device: ", gpuGetErrorString(e)));
  }
  if (count <= 0) return absl::UnavailableError("no CUDA device: none found");
  int driver_version = 0, runtime_version = 0;
  KS_RETURN_IF_ERROR(GpuStatus(gpuDriverGetVersion(&driver_version), "cudaDriverGetVersion"));
  KS_RETURN_IF_ERROR(GpuStatus(gpuRuntimeGetVersion(&runtime_version), "cudaRuntimeGetVersion"));
  const std::string driver = absl::StrCat("CUDA driver ", VersionString(driver_version),
                                          ", runtime ", VersionString(runtime_version));
  std::vector<std::unique_ptr<DeviceState>> devices;
  for (int i = 0; i < count; ++i) {
    auto d = OpenDevice(i, driver);
    if (!d.ok()) {
      return absl::UnavailableError(
          absl::StrCat("no CUDA device: device ", i, ": ", d.status().message()));
    }
    devices.push_back(std::move(d).value());
  }
  return std::unique_ptr<Backend>(new CudaBackend(std::move(devices)));
}

}  // namespace kernelserve
