// The hip worker's memory: inputs and the output in device memory of this
// worker's own HIP context (the runtime is dlopen'd, kernels/gpu/hip/
// hip_runtime.h, so the worker builds and starts on any machine and says
// why when there is no ROCm or no device), the output bracketed by canary
// blocks checked after every batch of launches; HIP events time the
// launches on the worker's stream. A code object is loaded with
// hipModuleLoadData and its kernel launched with hipModuleLaunchKernel, the
// op's args struct by value as its one argument.
//
// Written against HIP's documented C API and compiled everywhere; it has not
// run on an AMD GPU (none exists where this project is developed).
#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/gpu/hip/hip_runtime.h"
#include "server/user_kernels/worker_memory.h"

namespace kernelserve {
namespace user_kernels {
namespace {

namespace hip = ::kernelserve::gpu::hip;

constexpr uint8_t kCanary = 0xA5;
constexpr size_t kCanaryBytes = 64 << 10;

class HipMemory : public WorkerMemory {
 public:
  explicit HipMemory(int device) : device_(device) {
    const absl::StatusOr<hip::Runtime>& rt = hip::SharedRuntime();
    if (!rt.ok()) {
      init_ = absl::FailedPreconditionError(absl::StrCat("the hip worker has no HIP runtime: ", rt.status().message()));
      return;
    }
    rt_ = &*rt;
    int n = 0;
    const hip::Error e = rt_->GetDeviceCount(&n);
    if (e != hip::kSuccess || n <= 0) {
      init_ = absl::FailedPreconditionError(absl::StrCat("no HIP device on this node (hipGetDeviceCount: ",
                                                         e != hip::kSuccess ? rt_->Describe(e) : "0 devices", "; ",
                                                         rt_->library, ")"));
    } else if (device < 0 || device >= n) {
      init_ = absl::FailedPreconditionError(
          absl::StrCat("HIP device ", device, " does not exist (this node has ", n, ")"));
    } else {
      init_ = Call(rt_->SetDevice(device), "hipSetDevice");
      if (init_.ok()) init_ = Call(rt_->StreamCreate(&stream_), "hipStreamCreate");
    }
  }
  ~HipMemory() override {
    if (rt_ == nullptr) return;
    for (void* p : allocs_) (void)rt_->Free(p);
    if (stream_ != nullptr) (void)rt_->StreamDestroy(stream_);
  }

  absl::StatusOr<const void*> Input(const std::string&, const void* bytes, size_t n) override {
    void* p = nullptr;
    if (absl::Status st = Alloc(n, &p); !st.ok()) return st;
    if (absl::Status st = Call(rt_->Memcpy(p, bytes, n, hip::kHostToDevice), "hipMemcpy"); !st.ok()) return st;
    return static_cast<const void*>(p);
  }
  absl::StatusOr<void*> Output(size_t bytes) override {
    bytes_ = bytes;
    void* p = nullptr;
    if (absl::Status st = Alloc(bytes + 2 * kCanaryBytes, &p); !st.ok()) return st;
    base_ = static_cast<uint8_t*>(p);
    if (absl::Status st = Fill(base_, kCanary, bytes + 2 * kCanaryBytes); !st.ok()) return st;
    return static_cast<void*>(base_ + kCanaryBytes);
  }
  absl::StatusOr<void*> Scratch(size_t bytes) override {
    void* p = nullptr;
    if (absl::Status st = Alloc(bytes, &p); !st.ok()) return st;
    return p;
  }
  absl::Status Poison() override { return Fill(base_ + kCanaryBytes, 0xFF, bytes_); }
  absl::Status Check() override {
    if (absl::Status st = Call(rt_->StreamSynchronize(stream_), "after the kernel"); !st.ok()) return st;
    std::vector<uint8_t> before(kCanaryBytes), after(kCanaryBytes);
    if (absl::Status st = Call(rt_->Memcpy(before.data(), base_, kCanaryBytes, hip::kDeviceToHost), "hipMemcpy");
        !st.ok()) {
      return st;
    }
    if (absl::Status st = Call(rt_->Memcpy(after.data(), base_ + kCanaryBytes + bytes_, kCanaryBytes,
                                           hip::kDeviceToHost),
                               "hipMemcpy");
        !st.ok()) {
      return st;
    }
    return CheckCanaryBlocks(before.data(), after.data(), kCanaryBytes, kCanary);
  }
  absl::StatusOr<std::string> ReadOutput() override {
    std::string out(bytes_, '\0');
    if (absl::Status st = Call(rt_->Memcpy(out.data(), base_ + kCanaryBytes, bytes_, hip::kDeviceToHost), "hipMemcpy");
        !st.ok()) {
      return st;
    }
    return out;
  }
  void* stream() override { return stream_; }
  absl::StatusOr<double> Time(const std::function<int()>& launch, int n) override {
    hip::Event start = nullptr, stop = nullptr;
    if (absl::Status st = Call(rt_->EventCreate(&start), "hipEventCreate"); !st.ok()) return st;
    if (absl::Status st = Call(rt_->EventCreate(&stop), "hipEventCreate"); !st.ok()) return st;
    absl::Status st = Call(rt_->EventRecord(start, stream_), "hipEventRecord");
    for (int i = 0; i < n && st.ok(); ++i) {
      const int rc = launch();
      if (rc != 0) st = absl::AbortedError(absl::StrCat("the kernel returned ", rc, " (0 is success)"));
    }
    if (st.ok()) st = Call(rt_->EventRecord(stop, stream_), "hipEventRecord");
    if (st.ok()) st = Check();
    if (st.ok()) st = Call(rt_->EventSynchronize(stop), "hipEventSynchronize");
    float ms = 0;
    if (st.ok()) st = Call(rt_->EventElapsedTime(&ms, start, stop), "hipEventElapsedTime");
    (void)rt_->EventDestroy(start);
    (void)rt_->EventDestroy(stop);
    if (!st.ok()) return st;
    return static_cast<double>(ms);
  }
  absl::Status FlushCache(size_t bytes) override {
    if (bytes == 0) return absl::OkStatus();
    if (flush_bytes_ != bytes) {
      if (absl::Status st = Alloc(bytes, &flush_src_); !st.ok()) return st;
      if (absl::Status st = Alloc(bytes, &flush_dst_); !st.ok()) return st;
      flush_bytes_ = bytes;
    }
    if (absl::Status st = Call(rt_->MemcpyAsync(flush_dst_, flush_src_, bytes, hip::kDeviceToDevice, stream_),
                               "the L2 flush copy");
        !st.ok()) {
      return st;
    }
    return Call(rt_->StreamSynchronize(stream_), "after the L2 flush copy");
  }
  absl::StatusOr<DeviceLaunch> LoadDeviceKernel(const DeviceKernelSpec& spec) override;
  std::string Describe() const override {
    return absl::StrCat("device memory of the worker's own HIP context (", rt_ != nullptr ? rt_->library : "",
                        "), canaries");
  }

 private:
  // A failed call after the kernel ran: the device's error, which the server
  // reads as a possible device fault (worker_client.cc) and probes for.
  absl::Status Call(hip::Error e, const char* what) const {
    if (!init_.ok()) return init_;
    if (e == hip::kSuccess) return absl::OkStatus();
    return absl::AbortedError(absl::StrCat(what, " on HIP device ", device_, ": ", rt_->Describe(e),
                                           ": the kernel faulted on the device or left an error"));
  }
  absl::Status Alloc(size_t n, void** p) {
    if (!init_.ok()) return init_;
    const hip::Error e = rt_->Malloc(p, std::max<size_t>(n, 1));
    if (e != hip::kSuccess) return rt_->Check(e, absl::StrCat("hipMalloc of ", n, " bytes"));
    allocs_.push_back(*p);
    return absl::OkStatus();
  }
  absl::Status Fill(void* p, int value, size_t n) {
    if (absl::Status st = Call(rt_->MemsetAsync(p, value, n, stream_), "hipMemsetAsync"); !st.ok()) return st;
    return Call(rt_->StreamSynchronize(stream_), "hipStreamSynchronize");
  }

  const int device_;
  absl::Status init_;
  const hip::Runtime* rt_ = nullptr;
  hip::Stream stream_ = nullptr;
  std::vector<void*> allocs_;
  uint8_t* base_ = nullptr;
  size_t bytes_ = 0;
  void* flush_src_ = nullptr;
  void* flush_dst_ = nullptr;
  size_t flush_bytes_ = 0;
};

absl::StatusOr<DeviceLaunch> HipMemory::LoadDeviceKernel(const DeviceKernelSpec& spec) {
  if (!init_.ok()) return init_;
  std::ifstream f(spec.path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string image = ss.str();
  // Load errors leave the device as it was: named by the runtime's code, not
  // as a device fault.
  hip::Module module = nullptr;
  if (const hip::Error e = rt_->ModuleLoadData(&module, image.data()); e != hip::kSuccess) {
    const bool arch = e == hip::kErrorNoBinaryForGpu || e == hip::kErrorInvalidImage;
    return absl::InvalidArgumentError(absl::StrCat("the code object does not load on HIP device ", device_,
                                                   ": hipModuleLoadData returned ", rt_->Describe(e),
                                                   arch ? " (not this device's gfx architecture?)" : ""));
  }
  hip::Function fn = nullptr;
  if (const hip::Error e = rt_->ModuleGetFunction(&fn, module, spec.name.c_str()); e != hip::kSuccess) {
    return absl::InvalidArgumentError(absl::StrCat("the code object has no kernel ", spec.name, " (hipModuleGetFunction: ",
                                                   rt_->Describe(e), "); declare it extern \"C\" __global__"));
  }
  DeviceLaunch l;
  const hip::Runtime* rt = rt_;
  const hip::Stream stream = stream_;
  l.launch = [rt, fn, spec, stream](void* args) {
    void* params[] = {args};
    return static_cast<int>(rt->ModuleLaunchKernel(fn, spec.grid[0], spec.grid[1], spec.grid[2], spec.block[0],
                                                   spec.block[1], spec.block[2], spec.shared_bytes, stream, params,
                                                   nullptr));
  };
  l.describe = [rt, spec](int rc) {
    return absl::StrCat("hipModuleLaunchKernel(", spec.name, ", grid (", spec.grid[0], ",", spec.grid[1], ",",
                        spec.grid[2], "), block (", spec.block[0], ",", spec.block[1], ",", spec.block[2], "), ",
                        spec.shared_bytes, " bytes of dynamic LDS) failed: ", rt->Describe(rc));
  };
  return l;
}

}  // namespace

std::unique_ptr<WorkerMemory> MakeWorkerMemory(int device) { return std::make_unique<HipMemory>(device); }

}  // namespace user_kernels
}  // namespace kernelserve
