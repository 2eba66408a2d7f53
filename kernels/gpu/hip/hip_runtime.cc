#include "kernels/gpu/hip/hip_runtime.h"

#include <dlfcn.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kernelserve {
namespace gpu {
namespace hip {
namespace {

// Resolves `symbol` into `fn`; false (and `missing` set) when absent.
template <class Fn>
bool Resolve(void* handle, const char* symbol, Fn& fn, std::string& missing) {
  void* p = dlsym(handle, symbol);
  if (p == nullptr) {
    if (missing.empty()) missing = symbol;
    return false;
  }
  fn = reinterpret_cast<Fn>(p);
  return true;
}

// Every entry point, or the first missing one.
std::string ResolveAll(void* h, Runtime& r) {
  std::string missing;
  Resolve(h, "hipGetDeviceCount", r.GetDeviceCount, missing);
  Resolve(h, "hipSetDevice", r.SetDevice, missing);
  Resolve(h, "hipDeviceGetAttribute", r.DeviceGetAttribute, missing);
  Resolve(h, "hipDeviceGetName", r.DeviceGetName, missing);
  Resolve(h, "hipDeviceTotalMem", r.DeviceTotalMem, missing);
  Resolve(h, "hipDriverGetVersion", r.DriverGetVersion, missing);
  Resolve(h, "hipRuntimeGetVersion", r.RuntimeGetVersion, missing);
  Resolve(h, "hipDeviceSynchronize", r.DeviceSynchronize, missing);
  Resolve(h, "hipMalloc", r.Malloc, missing);
  Resolve(h, "hipFree", r.Free, missing);
  Resolve(h, "hipMemcpy", r.Memcpy, missing);
  Resolve(h, "hipMemcpyAsync", r.MemcpyAsync, missing);
  Resolve(h, "hipMemsetAsync", r.MemsetAsync, missing);
  Resolve(h, "hipStreamCreate", r.StreamCreate, missing);
  Resolve(h, "hipStreamDestroy", r.StreamDestroy, missing);
  Resolve(h, "hipStreamSynchronize", r.StreamSynchronize, missing);
  Resolve(h, "hipEventCreate", r.EventCreate, missing);
  Resolve(h, "hipEventDestroy", r.EventDestroy, missing);
  Resolve(h, "hipEventRecord", r.EventRecord, missing);
  Resolve(h, "hipEventSynchronize", r.EventSynchronize, missing);
  Resolve(h, "hipEventElapsedTime", r.EventElapsedTime, missing);
  Resolve(h, "hipModuleLoadData", r.ModuleLoadData, missing);
  Resolve(h, "hipModuleUnload", r.ModuleUnload, missing);
  Resolve(h, "hipModuleGetFunction", r.ModuleGetFunction, missing);
  Resolve(h, "hipModuleLaunchKernel", r.ModuleLaunchKernel, missing);
  Resolve(h, "hipGetErrorName", r.GetErrorName, missing);
  Resolve(h, "hipGetErrorString", r.GetErrorString, missing);
  // Optional: Runtime::HasGraphs says whether all of these resolved.
  std::string optional;
  Resolve(h, "hipStreamBeginCapture", r.StreamBeginCapture, optional);
  Resolve(h, "hipStreamEndCapture", r.StreamEndCapture, optional);
  Resolve(h, "hipStreamIsCapturing", r.StreamIsCapturing, optional);
  Resolve(h, "hipGraphInstantiate", r.GraphInstantiate, optional);
  Resolve(h, "hipGraphLaunch", r.GraphLaunch, optional);
  Resolve(h, "hipGraphExecDestroy", r.GraphExecDestroy, optional);
  Resolve(h, "hipGraphDestroy", r.GraphDestroy, optional);
  Resolve(h, "hipGetLastError", r.GetLastError, optional);
  return missing;
}

}  // namespace

std::vector<std::string> DefaultLibraryNames() {
  return {"libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"};
}

std::string Runtime::Describe(Error e) const {
  const char* name = GetErrorName ? GetErrorName(e) : nullptr;
  const char* text = GetErrorString ? GetErrorString(e) : nullptr;
  std::string out = name ? name : absl::StrCat("hipError ", e);
  if (text != nullptr && name != nullptr && std::string(text) != name) absl::StrAppend(&out, " (", text, ")");
  return out;
}

absl::Status Runtime::Check(Error e, absl::string_view what) const {
  if (e == kSuccess) return absl::OkStatus();
  const std::string msg = absl::StrCat(what, ": ", Describe(e));
  switch (e) {
    case kErrorOutOfMemory:
      return absl::ResourceExhaustedError(msg);
    case kErrorNoDevice:
    case kErrorIllegalAddress:
    case kErrorLaunchFailure:
      return absl::UnavailableError(msg);
    default:
      return absl::InternalError(msg);
  }
}

absl::StatusOr<Runtime> LoadRuntime(const std::vector<std::string>& names) {
  std::vector<std::string> tried;
  for (const std::string& name : names) {
    void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* err = dlerror();
      tried.push_back(absl::StrCat(name, " (", err ? err : "not loadable", ")"));
      continue;
    }
    Runtime r;
    const std::string missing = ResolveAll(h, r);
    if (!missing.empty()) {
      tried.push_back(absl::StrCat(name, " (loaded, but has no ", missing, ")"));
      dlclose(h);
      continue;
    }
    r.library = name;
    if (r.RuntimeGetVersion(&r.runtime_version) != kSuccess) r.runtime_version = 0;
    return r;
  }
  return absl::UnavailableError(absl::StrCat(
      "cannot load the HIP runtime (ROCm's libamdhip64; install ROCm or put its lib directory on "
      "LD_LIBRARY_PATH): tried ",
      names.empty() ? std::string("no library") : absl::StrJoin(tried, "; ")));
}

const absl::StatusOr<Runtime>& SharedRuntime() {
  static const absl::StatusOr<Runtime>* runtime = new absl::StatusOr<Runtime>(LoadRuntime(DefaultLibraryNames()));
  return *runtime;
}

}  // namespace hip
}  // namespace gpu
}  // namespace kernelserve
