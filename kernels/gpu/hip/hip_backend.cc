#include "kernels/gpu/hip/hip_backend.h"

#include <unistd.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/rocm_smi.h"
#include "common/status_macros.h"
#include "kernels/gpu/common/device_health.h"
#include "kernels/gpu/hip/hip_variants.h"

namespace kernelserve {
namespace gpu {
namespace hip {
namespace {

struct Device {
  DeviceInfo info;
  std::string arch;  // of the code objects that loaded; empty: none did
  int compute_units = 0;
  int64_t l2_bytes = 0;
  Stream stream = nullptr;
  std::vector<std::pair<const CodeObject*, Module>> modules;
  DeviceHealth health;
  mutable absl::Mutex mu;
  std::map<std::string, Function, std::less<>> functions ABSL_GUARDED_BY(mu);
  void* workspace ABSL_GUARDED_BY(mu) = nullptr;
  size_t workspace_bytes ABSL_GUARDED_BY(mu) = 0;
  // While TimeGraphReplays captures the device's stream: errors then are
  // the capture's, not faults, and the workspace cannot grow.
  std::atomic<bool> capturing{false};
};

// Graph launches before the timed ones (upload the graph, warm the caches).
constexpr int kGraphWarmupReplays = 3;

// A captured graph and its executable, destroyed with the scope.
struct GraphHolder {
  const Runtime& rt;
  Graph graph = nullptr;
  GraphExec exec = nullptr;
  ~GraphHolder() {
    if (exec != nullptr) (void)rt.GraphExecDestroy(exec);
    if (graph != nullptr) (void)rt.GraphDestroy(graph);
  }
};

// A code object built for another architecture is refused with one of these.
bool IsWrongTarget(Error e) {
  return e == kErrorNoBinaryForGpu || e == kErrorInvalidImage || e == 218 /* hipErrorInvalidKernelFile */;
}

class HipMemory : public DeviceMemory {
 public:
  HipMemory(const Runtime* rt, void* p, size_t size, int device) : rt_(rt), p_(p), size_(size), device_(device) {}
  ~HipMemory() override {
    // Freeing on a faulted device fails harmlessly; nothing to report to.
    if (rt_->SetDevice(device_) == kSuccess) (void)rt_->Free(p_);
  }
  void* data() const override { return p_; }
  size_t size() const override { return size_; }
  int device() const override { return device_; }

 private:
  const Runtime* rt_;
  void* p_;
  size_t size_;
  int device_;
};

class HipBackend : public Backend {
 public:
  HipBackend(const Runtime* rt, std::vector<std::unique_ptr<Device>> devices,
             const absl::StatusOr<Rocblas>& (*blas)())
      : rt_(rt), devices_(std::move(devices)), blas_(blas) {}

  ~HipBackend() override {
    for (auto& d : devices_) {
      if (rt_->SetDevice(d->info.index) != kSuccess) continue;
      {
        absl::MutexLock lock(&d->mu);
        if (d->workspace != nullptr) (void)rt_->Free(d->workspace);
      }
      for (auto& [object, module] : d->modules) (void)rt_->ModuleUnload(module);
      if (d->stream != nullptr) (void)rt_->StreamDestroy(d->stream);
    }
  }

  std::string Name() const override { return "hip"; }
  int DeviceCount() const override { return static_cast<int>(devices_.size()); }

  BackendCapabilities Capabilities() const override {
    BackendCapabilities c;
    c.device_timer = true;
    c.graph_replay = rt_->HasGraphs();
    c.timer = "HIP events around the launches (hipEventElapsedTime)";
    c.cache_bytes = devices_.empty() ? 0 : devices_[0]->l2_bytes;
    return c;
  }

  DeviceInfo GetDeviceInfo(int device) const override { return ReportDevice(devices_, Name(), device); }

  absl::StatusOr<std::unique_ptr<DeviceMemory>> Allocate(int device, size_t bytes) override {
    KS_ASSIGN_OR_RETURN(Device * d, Enter(device));
    void* p = nullptr;
    KS_RETURN_IF_ERROR(Fault(*d, rt_->Check(rt_->Malloc(&p, bytes == 0 ? 1 : bytes), "hipMalloc")));
    return std::unique_ptr<DeviceMemory>(new HipMemory(rt_, p, bytes, device));
  }

  absl::Status CopyToDevice(int device, void* dst, const void* src, size_t bytes) override {
    return Copy(device, dst, src, bytes, kHostToDevice, "hipMemcpy to the device");
  }
  absl::Status CopyToHost(int device, void* dst, const void* src, size_t bytes) override {
    return Copy(device, dst, src, bytes, kDeviceToHost, "hipMemcpy to the host");
  }
  absl::Status CopyOnDevice(int device, void* dst, const void* src, size_t bytes) override {
    return Copy(device, dst, src, bytes, kDeviceToDevice, "hipMemcpy on the device");
  }

  absl::Status Synchronize(int device) override {
    KS_ASSIGN_OR_RETURN(Device * d, Enter(device));
    return Fault(*d, rt_->Check(rt_->StreamSynchronize(d->stream), "hipStreamSynchronize"));
  }

  absl::Status Attention(int device, const AttentionParams& p, const TensorView& q, const TensorView& k,
                         const TensorView& v, TensorView& out) override {
    return Dispatch(device, MakeOpCall(p, q, k, v), out);
  }
  absl::Status Fp8Attention(int device, const Fp8AttentionParams& p, const Fp8AttentionInputs& in,
                            TensorView& out) override {
    return Dispatch(device, MakeOpCall(p, in), out);
  }
  absl::Status MlaDecode(int device, const MlaDecodeParams& p, const MlaDecodeInputs& in, TensorView& out) override {
    return Dispatch(device, MakeOpCall(p, in), out);
  }
  absl::Status Moe(int device, const MoeParams& p, const MoeInputs& in, TensorView& out) override {
    return Dispatch(device, MakeOpCall(p, in), out);
  }

  std::vector<KernelVariantInfo> KernelVariants() const override {
    std::vector<KernelVariantInfo> out;
    for (const Variant& v : Variants()) out.push_back({v.op, v.name, v.description, v.serves});
    return out;
  }

  absl::Status RunKernelVariant(int device, absl::string_view name, const OpCall& call, TensorView& out) override {
    std::vector<std::string> names;
    for (const Variant& v : Variants()) {
      if (!InTable(v, call.op)) continue;
      names.push_back(v.name);
      if (v.name != name) continue;
      KS_ASSIGN_OR_RETURN(Device * d, Enter(device));
      const std::string no = v.unsupported(d->arch, call);
      if (!no.empty()) return absl::UnimplementedError(absl::StrCat("hip.", name, " does not serve this call: ", no));
      return Run(*d, v, call, out);
    }
    return absl::NotFoundError(absl::StrCat("hip backend has no ", BenchOpName(call.op), " kernel variant \"", name,
                                            "\" (it has: ", names.empty() ? "none" : absl::StrJoin(names, ", "),
                                            ")"));
  }

  // rocBLAS's bf16 GEMM on the device's stream, after the work queued
  // there: UNAVAILABLE (the libraries tried) where rocBLAS does not load,
  // and the job's ceiling then says "not measured" and why.
  absl::StatusOr<GemmCeiling> MeasureGemmCeiling(int device, const std::function<bool()>& cancelled) override {
    KS_ASSIGN_OR_RETURN(Device * d, Enter(device));
    const absl::StatusOr<Rocblas>& blas = blas_();
    if (!blas.ok()) return blas.status();
    KS_RETURN_IF_ERROR(
        Fault(*d, rt_->Check(rt_->StreamSynchronize(d->stream), "hipStreamSynchronize before the GEMM ceiling")));
    absl::StatusOr<GemmRate> rate = MeasureRocblasBf16Gemm(*rt_, *blas, d->stream, cancelled);
    if (!rate.ok()) return Fault(*d, rate.status());
    return GemmCeiling{rate->tflops, rate->desc};
  }

  // Captures one call of `launch` on the device's stream (thread-local
  // mode: another thread's work is not swept in), instantiates it, replays
  // it kGraphWarmupReplays times, then times `replays` replays with events.
  absl::StatusOr<double> TimeGraphReplays(int device, const std::function<absl::Status()>& launch,
                                          int replays) override {
    if (replays <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("TimeGraphReplays: replays must be > 0, got ", replays));
    }
    KS_ASSIGN_OR_RETURN(Device * d, Enter(device));
    if (!rt_->HasGraphs()) {
      return absl::UnimplementedError(absl::StrCat(
          "backend hip has no graph capture here: ", rt_->library,
          " lacks part of the graph API (hipStreamBeginCapture, hipStreamEndCapture, hipGraphInstantiate, "
          "hipGraphLaunch)"));
    }
    // Faults of earlier work surface here, outside the capture, where they count.
    KS_RETURN_IF_ERROR(
        Fault(*d, rt_->Check(rt_->StreamSynchronize(d->stream), "hipStreamSynchronize before graph capture")));
    GraphHolder g{*rt_};
    KS_RETURN_IF_ERROR(
        rt_->Check(rt_->StreamBeginCapture(d->stream, kCaptureModeThreadLocal), "hipStreamBeginCapture"));
    d->capturing = true;
    const absl::Status launched = launch();
    d->capturing = false;
    const Error end = rt_->StreamEndCapture(d->stream, &g.graph);
    (void)rt_->GetLastError();  // a capture's errors are not the device's; leave none behind
    int status = kCaptureStatusNone;
    if (rt_->StreamIsCapturing(d->stream, &status) != kSuccess || status != kCaptureStatusNone) {
      (void)rt_->GetLastError();
      return absl::InternalError(
          absl::StrCat("hip device ", device, ": the stream is still capturing after hipStreamEndCapture"));
    }
    // The stream is usable again; a real fault would show here and count.
    KS_RETURN_IF_ERROR(
        Fault(*d, rt_->Check(rt_->StreamSynchronize(d->stream), "hipStreamSynchronize after graph capture")));
    if (!launched.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "graph capture on hip device ", device,
          ": the launch failed while being captured (an op that synchronises, copies to the host or allocates "
          "cannot be captured): ",
          launched.ToString()));
    }
    if (end != kSuccess || g.graph == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat("graph capture on hip device ", device,
                                                        ": hipStreamEndCapture: ",
                                                        end == kSuccess ? "no graph (empty capture)" : rt_->Describe(end),
                                                        "; the launch did something that cannot be captured"));
    }
    const Error inst = rt_->GraphInstantiate(&g.exec, g.graph, nullptr, nullptr, 0);
    if (inst != kSuccess) {
      g.exec = nullptr;
      (void)rt_->GetLastError();
      const absl::Status s = rt_->Check(inst, "hipGraphInstantiate");
      if (s.code() == absl::StatusCode::kUnavailable) return Fault(*d, s);
      return absl::FailedPreconditionError(absl::StrCat("graph capture on hip device ", device, ": ", s.message()));
    }
    for (int i = 0; i < kGraphWarmupReplays; ++i) {
      KS_RETURN_IF_ERROR(Fault(*d, rt_->Check(rt_->GraphLaunch(g.exec, d->stream), "hipGraphLaunch (warm-up)")));
    }
    return TimeLaunches(
        device, [&]() { return Fault(*d, rt_->Check(rt_->GraphLaunch(g.exec, d->stream), "hipGraphLaunch")); },
        replays);
  }

  absl::StatusOr<double> TimeLaunches(int device, const std::function<absl::Status()>& launch, int n) override {
    KS_ASSIGN_OR_RETURN(Device * d, Enter(device));
    Event start = nullptr, stop = nullptr;
    KS_RETURN_IF_ERROR(rt_->Check(rt_->EventCreate(&start), "hipEventCreate"));
    absl::Status s = rt_->Check(rt_->EventCreate(&stop), "hipEventCreate");
    float ms = 0;
    if (s.ok()) s = rt_->Check(rt_->EventRecord(start, d->stream), "hipEventRecord");
    for (int i = 0; s.ok() && i < n; ++i) s = launch();
    if (s.ok()) s = rt_->Check(rt_->EventRecord(stop, d->stream), "hipEventRecord");
    if (s.ok()) s = Fault(*d, rt_->Check(rt_->EventSynchronize(stop), "hipEventSynchronize"));
    if (s.ok()) s = rt_->Check(rt_->EventElapsedTime(&ms, start, stop), "hipEventElapsedTime");
    (void)rt_->EventDestroy(start);
    if (stop != nullptr) (void)rt_->EventDestroy(stop);
    KS_RETURN_IF_ERROR(s);
    return n > 0 ? static_cast<double>(ms) / n : 0.0;
  }

 private:
  // The device, current on this thread, or why not.
  absl::StatusOr<Device*> Enter(int device) {
    KS_ASSIGN_OR_RETURN(Device * d, HealthyDevice(devices_, "hip", device, " on backend hip"));
    KS_RETURN_IF_ERROR(rt_->Check(rt_->SetDevice(device), "hipSetDevice"));
    return d;
  }

  // A fault (UNAVAILABLE from Runtime::Check) leaves the device unusable.
  absl::Status Fault(Device& d, absl::Status s) {
    if (s.code() == absl::StatusCode::kUnavailable && !d.capturing) d.health.MarkUnhealthy(s.message());
    return s;
  }

  absl::Status Copy(int device, void* dst, const void* src, size_t bytes, MemcpyKind kind, const char* what) {
    KS_ASSIGN_OR_RETURN(Device * d, Enter(device));
    if (bytes == 0) return absl::OkStatus();
    // In stream order with the kernels, then waited for: the caller's host
    // memory is free to reuse on return.
    absl::Status s = rt_->Check(rt_->MemcpyAsync(dst, src, bytes, kind, d->stream), what);
    if (s.ok()) s = rt_->Check(rt_->StreamSynchronize(d->stream), what);
    return Fault(*d, s);
  }

  absl::Status Dispatch(int device, const OpCall& call, TensorView& out) {
    KS_ASSIGN_OR_RETURN(Device * d, Enter(device));
    KS_ASSIGN_OR_RETURN(const Variant* v, Select(d->arch, call));
    return Run(*d, *v, call, out);
  }

  absl::Status Run(Device& d, const Variant& v, const OpCall& call, TensorView& out) {
    LaunchContext ctx;
    ctx.rt = rt_;
    ctx.stream = d.stream;
    ctx.arch = d.arch;
    ctx.compute_units = d.compute_units;
    ctx.kernel = [this, &d](absl::string_view name) { return Kernel(d, name); };
    ctx.workspace = [this, &d](size_t bytes) { return Workspace(d, bytes); };
    return Fault(d, v.run(ctx, call, out));
  }

  absl::StatusOr<Function> Kernel(Device& d, absl::string_view name) {
    absl::MutexLock lock(&d.mu);
    auto it = d.functions.find(name);
    if (it != d.functions.end()) return it->second;
    for (auto& [object, module] : d.modules) {
      const std::string symbol = FindKernelSymbol(*object, name);
      if (symbol.empty()) continue;
      Function f = nullptr;
      KS_RETURN_IF_ERROR(
          rt_->Check(rt_->ModuleGetFunction(&f, module, symbol.c_str()), absl::StrCat("hipModuleGetFunction ", symbol)));
      d.functions.emplace(std::string(name), f);
      return f;
    }
    return absl::NotFoundError(absl::StrCat("no ", d.arch, " code object of this build has the kernel ", name));
  }

  // Grows only; reused in stream order (the previous call's kernels that
  // read it were queued before this call's on the same stream). Growing
  // waits for the stream first, then frees the old block.
  absl::StatusOr<void*> Workspace(Device& d, size_t bytes) {
    absl::MutexLock lock(&d.mu);
    if (bytes <= d.workspace_bytes) return d.workspace;
    if (d.capturing) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the kernel workspace must grow to ", bytes, " bytes (it has ", d.workspace_bytes,
          "), which a graph capture cannot do (hipMalloc); a call of this shape outside the capture grows it"));
    }
    if (d.workspace != nullptr) {
      KS_RETURN_IF_ERROR(rt_->Check(rt_->StreamSynchronize(d.stream), "hipStreamSynchronize"));
      (void)rt_->Free(d.workspace);
      d.workspace = nullptr;
      d.workspace_bytes = 0;
    }
    KS_RETURN_IF_ERROR(rt_->Check(rt_->Malloc(&d.workspace, bytes), "hipMalloc (kernel workspace)"));
    d.workspace_bytes = bytes;
    return d.workspace;
  }

  const Runtime* rt_;
  std::vector<std::unique_ptr<Device>> devices_;
  const absl::StatusOr<Rocblas>& (*blas_)();
};

// Loads the code objects of one architecture on the current device: all of
// them, or none (and why).
std::string LoadArch(const Runtime& rt, const std::vector<const CodeObject*>& objects, Device& d) {
  for (const CodeObject* o : objects) {
    Module m = nullptr;
    const Error e = rt.ModuleLoadData(&m, o->data);
    if (e != kSuccess) {
      for (auto& [object, module] : d.modules) (void)rt.ModuleUnload(module);
      d.modules.clear();
      return absl::StrCat(o->name, ": ", rt.Describe(e), IsWrongTarget(e) ? " (not this device's architecture)" : "");
    }
    d.modules.emplace_back(o, m);
  }
  return "";
}

absl::Status SetUpDevice(const Runtime& rt, const std::vector<CodeObject>& objects, int index, Device& d) {
  KS_RETURN_IF_ERROR(rt.Check(rt.SetDevice(index), "hipSetDevice"));
  d.info.index = index;
  d.info.backend = "hip";
  char name[256] = {};
  if (rt.DeviceGetName(name, sizeof(name) - 1, index) == kSuccess) d.info.name = name;
  size_t total = 0;
  if (rt.DeviceTotalMem(&total, index) == kSuccess) d.info.memory_total_bytes = static_cast<int64_t>(total);
  int v = 0;
  if (rt.DeviceGetAttribute(&v, kAttrMultiprocessorCount, index) == kSuccess) d.compute_units = v;
  d.info.compute_units = d.compute_units;
  if (rt.DeviceGetAttribute(&v, kAttrClockRateKhz, index) == kSuccess) d.info.clock_mhz = v / 1000;
  if (rt.DeviceGetAttribute(&v, kAttrMemoryClockRateKhz, index) == kSuccess) d.info.memory_clock_mhz = v / 1000;
  if (rt.DeviceGetAttribute(&v, kAttrL2CacheBytes, index) == kSuccess) d.l2_bytes = v;
  int driver = 0;
  (void)rt.DriverGetVersion(&driver);
  KS_RETURN_IF_ERROR(rt.Check(rt.StreamCreate(&d.stream), "hipStreamCreate"));
  if (d.compute_units <= 0) d.compute_units = 1;

  // The architecture is the one whose code objects load: the runtime refuses
  // an object built for another target, and no device-property layout
  // (which changes between ROCm releases) has to be trusted for it.
  std::map<std::string, std::vector<const CodeObject*>> by_arch;
  for (const CodeObject& o : objects) by_arch[o.arch].push_back(&o);
  std::vector<std::string> refused;
  for (const auto& [arch, list] : by_arch) {
    const std::string no = LoadArch(rt, list, d);
    if (no.empty()) {
      d.arch = arch;
      break;
    }
    refused.push_back(absl::StrCat(arch, ": ", no));
  }
  d.info.driver = absl::StrCat("HIP runtime ", rt.runtime_version, ", driver ", driver, " (", rt.library, ")",
                               d.arch.empty() ? "" : absl::StrCat("; code objects ", d.arch));
  if (d.arch.empty()) {
    d.health.MarkUnhealthy(objects.empty() ? "this build embeds no AMD code objects"
                                           : absl::StrCat("no code object of this build loads on it: ",
                                                          absl::StrJoin(refused, "; ")));
  }
  return absl::OkStatus();
}

// Runtimes that report no clock rate (0, or the attribute refused) get the
// highest clocks ROCm SMI lists for the device; without SMI they stay 0.
void FillClocksFromSmi(std::vector<std::unique_ptr<Device>>& devices) {
  bool missing = false;
  for (const auto& d : devices) missing |= d->info.clock_mhz <= 0 || d->info.memory_clock_mhz <= 0;
  if (!missing) return;
  absl::StatusOr<std::unique_ptr<rocm_smi::Smi>> smi = rocm_smi::Smi::Open();
  if (!smi.ok()) return;
  for (auto& d : devices) {
    absl::StatusOr<uint32_t> index = rocm_smi::SmiIndexFromEnvironment(d->info.index);
    if (!index.ok()) continue;
    if (d->info.clock_mhz <= 0) {
      if (auto f = (*smi)->SysClock(*index); f.ok()) d->info.clock_mhz = static_cast<int>(f->max_hz / 1000000);
    }
    if (d->info.memory_clock_mhz <= 0) {
      if (auto f = (*smi)->MemClock(*index); f.ok()) d->info.memory_clock_mhz = static_cast<int>(f->max_hz / 1000000);
    }
  }
}

}  // namespace

std::string KfdHint(const char* kfd) {
  if (access(kfd, F_OK) != 0) {
    return absl::StrCat("; ", kfd, " does not exist: this machine has no amdgpu kernel driver, or the container ",
                        "was started without --device=/dev/kfd --device=/dev/dri");
  }
  if (access(kfd, R_OK | W_OK) != 0) {
    return absl::StrCat("; ", kfd, " exists but this user cannot open it (it belongs to the render or video group)");
  }
  return "";
}

absl::StatusOr<std::unique_ptr<Backend>> CreateHipBackendWith(const absl::StatusOr<Runtime>& runtime,
                                                              const std::vector<CodeObject>& objects,
                                                              const absl::StatusOr<Rocblas>& (*blas)()) {
  if (!runtime.ok()) return runtime.status();
  const Runtime& rt = *runtime;
  int n = 0;
  const Error e = rt.GetDeviceCount(&n);
  if (e != kSuccess || n <= 0) {
    return absl::UnavailableError(absl::StrCat("no HIP device: hipGetDeviceCount: ",
                                               e != kSuccess ? rt.Describe(e) : "0 devices", " (", rt.library,
                                               ", HIP runtime ", rt.runtime_version, ")",
                                               KfdHint("/dev/kfd")));
  }
  std::vector<std::unique_ptr<Device>> devices;
  for (int i = 0; i < n; ++i) {
    auto d = std::make_unique<Device>();
    KS_RETURN_IF_ERROR(SetUpDevice(rt, objects, i, *d));
    devices.push_back(std::move(d));
  }
  FillClocksFromSmi(devices);
  return std::unique_ptr<Backend>(new HipBackend(&rt, std::move(devices), blas));
}

}  // namespace hip
}  // namespace gpu
}  // namespace kernelserve
