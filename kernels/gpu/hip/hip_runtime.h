// The HIP runtime (ROCm's libamdhip64), loaded at run time: kernelserve never
// links ROCm, so one binary runs on machines with and without it. The few
// entry points the HIP backend uses are declared here with our own types
// (HIP's C ABI: handles are pointers, errors are ints), so this compiles
// without ROCm or HIP headers and is tested on every machine.
#ifndef KERNELSERVE_KERNELS_GPU_HIP_HIP_RUNTIME_H_
#define KERNELSERVE_KERNELS_GPU_HIP_HIP_RUNTIME_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kernelserve {
namespace gpu {
namespace hip {

using Error = int;  // hipError_t
constexpr Error kSuccess = 0;
// The hipError_t codes the backend tells apart (hip_runtime_api.h).
constexpr Error kErrorOutOfMemory = 2;
constexpr Error kErrorNoDevice = 100;
constexpr Error kErrorInvalidImage = 200;
constexpr Error kErrorNoBinaryForGpu = 209;
constexpr Error kErrorIllegalAddress = 700;
constexpr Error kErrorLaunchFailure = 719;

using Module = struct ihipModule_t*;
using Function = struct ihipModuleSymbol_t*;
using Stream = struct ihipStream_t*;
using Event = struct ihipEvent_t*;
using Graph = struct ihipGraph*;
using GraphExec = struct hipGraphExec*;

// hipStreamCaptureMode and hipStreamCaptureStatus values used.
constexpr int kCaptureModeThreadLocal = 1;
constexpr int kCaptureStatusNone = 0;

// hipMemcpyKind.
enum MemcpyKind : int { kHostToDevice = 1, kDeviceToHost = 2, kDeviceToDevice = 3 };

// hipDeviceAttribute_t values the backend reads (the CUDA-compatible block of
// the enum, hip_runtime_api.h).
enum DeviceAttribute : int {
  kAttrClockRateKhz = 5,
  kAttrL2CacheBytes = 19,
  kAttrMemoryClockRateKhz = 60,
  kAttrMultiprocessorCount = 63,
  kAttrMaxSharedMemoryPerBlock = 74,
};

// The shared-library names tried, in order: the development symlink, then
// the sonames of ROCm 6 and 5.
std::vector<std::string> DefaultLibraryNames();

struct Runtime {
  // Where it was loaded from (the name that dlopen accepted) and its version.
  std::string library;
  int runtime_version = 0;  // hipRuntimeGetVersion

  Error (*GetDeviceCount)(int*) = nullptr;
  Error (*SetDevice)(int) = nullptr;
  Error (*DeviceGetAttribute)(int*, int, int) = nullptr;
  Error (*DeviceGetName)(char*, int, int) = nullptr;
  Error (*DeviceTotalMem)(size_t*, int) = nullptr;
  Error (*DriverGetVersion)(int*) = nullptr;
  Error (*RuntimeGetVersion)(int*) = nullptr;
  Error (*DeviceSynchronize)() = nullptr;
  Error (*Malloc)(void**, size_t) = nullptr;
  Error (*Free)(void*) = nullptr;
  Error (*Memcpy)(void*, const void*, size_t, int) = nullptr;
  Error (*MemcpyAsync)(void*, const void*, size_t, int, Stream) = nullptr;
  Error (*MemsetAsync)(void*, int, size_t, Stream) = nullptr;
  Error (*StreamCreate)(Stream*) = nullptr;
  Error (*StreamDestroy)(Stream) = nullptr;
  Error (*StreamSynchronize)(Stream) = nullptr;
  Error (*EventCreate)(Event*) = nullptr;
  Error (*EventDestroy)(Event) = nullptr;
  Error (*EventRecord)(Event, Stream) = nullptr;
  Error (*EventSynchronize)(Event) = nullptr;
  Error (*EventElapsedTime)(float*, Event, Event) = nullptr;
  Error (*ModuleLoadData)(Module*, const void*) = nullptr;
  Error (*ModuleUnload)(Module) = nullptr;
  Error (*ModuleGetFunction)(Function*, Module, const char*) = nullptr;
  Error (*ModuleLaunchKernel)(Function, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              Stream, void**, void**) = nullptr;
  const char* (*GetErrorName)(Error) = nullptr;
  const char* (*GetErrorString)(Error) = nullptr;

  // Graph capture and replay: optional (null where the library lacks any of
  // them; the backend then has no graph timing), so a runtime without them
  // still serves every op.
  Error (*StreamBeginCapture)(Stream, int mode) = nullptr;
  Error (*StreamEndCapture)(Stream, Graph*) = nullptr;
  Error (*StreamIsCapturing)(Stream, int* status) = nullptr;
  Error (*GraphInstantiate)(GraphExec*, Graph, void* error_node, char* log, size_t log_bytes) = nullptr;
  Error (*GraphLaunch)(GraphExec, Stream) = nullptr;
  Error (*GraphExecDestroy)(GraphExec) = nullptr;
  Error (*GraphDestroy)(Graph) = nullptr;
  Error (*GetLastError)() = nullptr;
  bool HasGraphs() const {
    return StreamBeginCapture && StreamEndCapture && StreamIsCapturing && GraphInstantiate && GraphLaunch &&
           GraphExecDestroy && GraphDestroy && GetLastError;
  }

  // "hipErrorNoDevice (no ROCm-capable device is detected)" and the like.
  std::string Describe(Error e) const;
  // OK for kSuccess, else the code for `e` (RESOURCE_EXHAUSTED for memory,
  // UNAVAILABLE for a fault or no device, INTERNAL otherwise) with
  // "<what>: <Describe(e)>".
  absl::Status Check(Error e, absl::string_view what) const;
};

// dlopens the first of `names` that loads and resolves every entry point of
// Runtime. UNAVAILABLE when none does, naming each library tried and why
// (dlerror, or the missing symbol). The handle stays open for the process.
absl::StatusOr<Runtime> LoadRuntime(const std::vector<std::string>& names);

// The process-wide runtime from DefaultLibraryNames(), loaded once (the
// status of the first attempt is kept: a library does not appear later).
const absl::StatusOr<Runtime>& SharedRuntime();

}  // namespace hip
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_HIP_HIP_RUNTIME_H_
