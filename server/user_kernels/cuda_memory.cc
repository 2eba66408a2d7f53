// The cuda worker's memory: inputs and the output in device memory of this
// worker's own CUDA context (a fault poisons that context only), the output
// bracketed by canary blocks checked after every batch of launches; device
// events time the launches on the worker's stream. A device-side fault
// (an illegal address) surfaces as the stream's error and fails the job
// with the CUDA error's name.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>
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

// The driver API, through the runtime's entry-point query so that nothing
// links -lcuda (as kernels/gpu/arch/sm90/tensor_map.h does).
struct Driver {
  CUresult (*load)(CUmodule*, const void*, unsigned, CUjit_option*, void**) = nullptr;
  CUresult (*get_function)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*get_attribute)(int*, CUfunction_attribute, CUfunction) = nullptr;
  CUresult (*set_attribute)(CUfunction, CUfunction_attribute, int) = nullptr;
  CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                     void**, void**) = nullptr;
  CUresult (*param_info)(CUfunction, size_t, size_t*, size_t*) = nullptr;  // CUDA 12.4+; may be missing
  CUresult (*error_name)(CUresult, const char**) = nullptr;
  CUresult (*error_string)(CUresult, const char**) = nullptr;
  std::string missing;
};

template <typename F>
void Lookup(const char* symbol, int version, F* fn, std::string* missing) {
  void* f = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(symbol, &f, version, cudaEnableDefault, &found) == cudaSuccess &&
      found == cudaDriverEntryPointSuccess) {
    *fn = reinterpret_cast<F>(f);
  } else if (missing != nullptr) {
    absl::StrAppend(missing, missing->empty() ? "" : ", ", symbol);
  }
}

const Driver& GetDriver() {
  static const Driver* d = [] {
    auto* r = new Driver;
    Lookup("cuModuleLoadDataEx", 12000, &r->load, &r->missing);
    Lookup("cuModuleGetFunction", 12000, &r->get_function, &r->missing);
    Lookup("cuFuncGetAttribute", 12000, &r->get_attribute, &r->missing);
    Lookup("cuFuncSetAttribute", 12000, &r->set_attribute, &r->missing);
    Lookup("cuLaunchKernel", 12000, &r->launch, &r->missing);
    Lookup("cuGetErrorName", 12000, &r->error_name, &r->missing);
    Lookup("cuGetErrorString", 12000, &r->error_string, &r->missing);
    Lookup("cuFuncGetParamInfo", 12040, &r->param_info, static_cast<std::string*>(nullptr));
    return r;
  }();
  return *d;
}

// "CUDA_ERROR_NO_BINARY_FOR_GPU (no kernel image is available ...)". Driver
// names, never the runtime's cudaError...: a failed load or launch leaves
// the device as it was (worker_client.cc reads cudaError... as a device fault).
std::string DriverError(CUresult r) {
  const Driver& d = GetDriver();
  const char* name = nullptr;
  const char* text = nullptr;
  if (d.error_name != nullptr) d.error_name(r, &name);
  if (d.error_string != nullptr) d.error_string(r, &text);
  return absl::StrCat(name != nullptr ? name : absl::StrCat("CUresult ", static_cast<int>(r)), " (",
                      text != nullptr ? text : "", ")");
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
  absl::StatusOr<void*> Scratch(size_t bytes) override {
    if (!init_.ok()) return init_;
    void* p = nullptr;
    if (absl::Status st = CudaStatus(cudaMalloc(&p, std::max<size_t>(bytes, 1)), "cudaMalloc"); !st.ok()) return st;
    allocs_.push_back(p);
    return p;
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
    return CheckCanaryBlocks(before.data(), after.data(), kCanaryBytes, kCanary);
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
  absl::Status FlushCache(size_t bytes) override {
    if (!init_.ok()) return init_;
    if (bytes == 0) return absl::OkStatus();
    if (flush_bytes_ != bytes) {
      if (cudaMalloc(&flush_src_, bytes) != cudaSuccess || cudaMalloc(&flush_dst_, bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        return absl::ResourceExhaustedError(absl::StrCat("cudaMalloc of the L2 flush buffers (2 x ", bytes, " bytes)"));
      }
      allocs_.push_back(flush_src_);
      allocs_.push_back(flush_dst_);
      flush_bytes_ = bytes;
    }
    if (absl::Status st = CudaStatus(cudaMemcpyAsync(flush_dst_, flush_src_, bytes, cudaMemcpyDeviceToDevice, stream_),
                                     "the L2 flush copy");
        !st.ok()) {
      return st;
    }
    return CudaStatus(cudaStreamSynchronize(stream_), "after the L2 flush copy");
  }
  absl::StatusOr<double> TimeGraph(const std::function<int()>& launch, int replays) override;
  absl::StatusOr<DeviceLaunch> LoadDeviceKernel(const DeviceKernelSpec& spec) override;
  std::string Describe() const override { return "device memory of the worker's own CUDA context, canaries"; }

 private:
  absl::Status init_;
  cudaStream_t stream_ = nullptr;
  std::vector<void*> allocs_;
  uint8_t* base_ = nullptr;
  size_t bytes_ = 0;
  void* flush_src_ = nullptr;
  void* flush_dst_ = nullptr;
  size_t flush_bytes_ = 0;
};

// As the cuda backend's TimeGraphReplays (kernels/gpu/gpu_backend.cc): the
// capture is thread-local, so a call that cannot be captured (a
// synchronisation, an allocation, a launch on another stream) fails the
// capture, not the process; a fault of the kernel shows at the
// synchronisation after it and is the kernel's.
absl::StatusOr<double> CudaMemory::TimeGraph(const std::function<int()>& launch, int replays) {
  if (!init_.ok()) return init_;
  if (absl::Status st = CudaStatus(cudaStreamSynchronize(stream_), "before graph capture"); !st.ok()) return st;
  if (cudaError_t e = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal); e != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::FailedPreconditionError(absl::StrCat("cudaStreamBeginCapture: ", cudaGetErrorName(e)));
  }
  const int rc = launch();
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
  (void)cudaGetLastError();  // capture errors are not sticky; leave none behind
  struct Holder {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    ~Holder() {
      if (exec != nullptr) cudaGraphExecDestroy(exec);
      if (graph != nullptr) cudaGraphDestroy(graph);
    }
  } g;
  g.graph = graph;
  if (absl::Status st = CudaStatus(cudaStreamSynchronize(stream_), "after graph capture"); !st.ok()) return st;
  if (rc != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the launch returned ", rc,
        " while being captured into a CUDA graph (a call that synchronises, allocates or copies to the host, or "
        "a launch on another stream than the ABI's, cannot be captured)"));
  }
  if (end != cudaSuccess || graph == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cudaStreamEndCapture: ", end == cudaSuccess ? "no graph" : cudaGetErrorName(end),
                     " (the launch did something that cannot be captured: a synchronisation, an allocation, a "
                     "launch on the legacy default stream)"));
  }
  size_t nodes = 0;
  if (cudaGraphGetNodes(graph, nullptr, &nodes) != cudaSuccess || nodes == 0) {
    (void)cudaGetLastError();
    return absl::FailedPreconditionError(
        "the captured graph is empty: the kernel enqueued nothing on the ABI's stream (launch on `stream`)");
  }
  if (cudaError_t e = cudaGraphInstantiateWithFlags(&g.exec, graph, 0); e != cudaSuccess) {
    g.exec = nullptr;
    (void)cudaGetLastError();
    return absl::FailedPreconditionError(absl::StrCat("cudaGraphInstantiate: ", cudaGetErrorName(e)));
  }
  if (absl::Status st = CudaStatus(cudaGraphLaunch(g.exec, stream_), "cudaGraphLaunch (warm-up)"); !st.ok()) return st;
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start, stream_);
  absl::Status launched;
  for (int i = 0; i < replays && launched.ok(); ++i) launched = CudaStatus(cudaGraphLaunch(g.exec, stream_), "cudaGraphLaunch");
  cudaEventRecord(stop, stream_);
  absl::Status st = launched.ok() ? Check() : launched;
  float ms = 0;
  if (st.ok()) st = CudaStatus(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (!st.ok()) return st;
  return static_cast<double>(ms);
}

absl::StatusOr<DeviceLaunch> CudaMemory::LoadDeviceKernel(const DeviceKernelSpec& spec) {
  if (!init_.ok()) return init_;
  const Driver& drv = GetDriver();
  if (!drv.missing.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("the CUDA driver lacks ", drv.missing,
                                                      ": a cubin or PTX cannot be loaded on this node"));
  }
  std::ifstream f(spec.path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string image = ss.str();  // PTX must end with a NUL: c_str() has it
  const char* what = spec.ptx ? "the PTX" : "the cubin";
  // The JIT's (or loader's) own words on why an image does not load.
  std::vector<char> error_log(8192, '\0'), info_log(8192, '\0');
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_INFO_LOG_BUFFER,
                            CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {error_log.data(), reinterpret_cast<void*>(error_log.size()), info_log.data(),
                    reinterpret_cast<void*>(info_log.size())};
  CUmodule module = nullptr;
  if (CUresult r = drv.load(&module, image.c_str(), 4, options, values); r != CUDA_SUCCESS) {
    return absl::InvalidArgumentError(absl::StrCat(what, " does not load on this device: ", DriverError(r),
                                                   error_log[0] != 0 ? absl::StrCat("; ", error_log.data()) : ""));
  }
  CUfunction fn = nullptr;
  if (CUresult r = drv.get_function(&fn, module, spec.name.c_str()); r != CUDA_SUCCESS) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has no kernel ", spec.name, " (", DriverError(r), "); declare it extern \"C\" __global__"));
  }
  // The one parameter must be the op's args struct (drivers before 12.4
  // cannot say; the submit checks read PTX's declaration).
  if (drv.param_info != nullptr) {
    size_t offset = 0, size = 0, more_offset = 0, more_size = 0;
    const bool first = drv.param_info(fn, 0, &offset, &size) == CUDA_SUCCESS;
    const bool second = drv.param_info(fn, 1, &more_offset, &more_size) == CUDA_SUCCESS;
    if (!first || second || size != spec.args_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          spec.name, " takes ", !first ? "no parameter" : second ? "more than one parameter" : absl::StrCat(size, " bytes"),
          "; the ABI passes the op's args struct by value (", spec.args_bytes, " bytes) as its one parameter"));
    }
  }
  const uint64_t threads = uint64_t{spec.block[0]} * spec.block[1] * spec.block[2];
  int max_threads = 0, static_shared = 0;
  drv.get_attribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fn);
  drv.get_attribute(&static_shared, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn);
  if (max_threads > 0 && threads > static_cast<uint64_t>(max_threads)) {
    return absl::InvalidArgumentError(absl::StrCat("launch.block_x: ", threads, " threads per block, but ", spec.name,
                                                   " allows at most ", max_threads,
                                                   " (its registers or __launch_bounds__)"));
  }
  if (spec.shared_bytes > 48 * 1024) {
    if (CUresult r = drv.set_attribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                       static_cast<int>(spec.shared_bytes));
        r != CUDA_SUCCESS) {
      return absl::InvalidArgumentError(absl::StrCat("launch.dynamic_shared_bytes: ", spec.shared_bytes, " bytes beside ",
                                                     static_shared, " of static shared memory do not fit on this device: ",
                                                     DriverError(r)));
    }
  }
  DeviceLaunch l;
  const CUstream stream = reinterpret_cast<CUstream>(stream_);
  l.launch = [fn, spec, stream, launch = drv.launch](void* args) {
    void* params[] = {args};
    return static_cast<int>(launch(fn, spec.grid[0], spec.grid[1], spec.grid[2], spec.block[0], spec.block[1],
                                   spec.block[2], spec.shared_bytes, stream, params, nullptr));
  };
  l.describe = [spec](int rc) {
    return absl::StrCat("cuLaunchKernel(", spec.name, ", grid (", spec.grid[0], ",", spec.grid[1], ",", spec.grid[2],
                        "), block (", spec.block[0], ",", spec.block[1], ",", spec.block[2], "), ", spec.shared_bytes,
                        " bytes of dynamic shared memory) failed: ", DriverError(static_cast<CUresult>(rc)));
  };
  return l;
}

}  // namespace

std::unique_ptr<WorkerMemory> MakeWorkerMemory(int device) { return std::make_unique<CudaMemory>(device); }

}  // namespace user_kernels
}  // namespace kernelserve
