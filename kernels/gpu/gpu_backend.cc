#include "kernels/gpu/gpu_backend.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/block_cache.h"
#include "common/status_macros.h"
#include "kernels/gpu/attention/attention_variants.h"
#include "kernels/gpu/common/device_health.h"
#include "kernels/gpu/common/gpu.h"
#include "kernels/gpu/common/gpu_status.h"
#include "kernels/gpu/common/kernel_variant.h"
#include "kernels/gpu/decode_attention/decode_attention.h"
#include "kernels/gpu/fp8_attention/fp8_attention_variants.h"
#include "kernels/gpu/gemm_ceiling.h"
#include "kernels/gpu/mla/mla_decode_variants.h"
#include "kernels/gpu/moe/moe_variants.h"

namespace kernelserve {
namespace {

using gpu::GpuStatus;
using gpu::IsStickyError;


// Per-device state. Health is the only mutable part shared between threads.
struct DeviceState {
  DeviceInfo info;
  gpu::DeviceCaps caps;  // what the variant tables' predicates read
  int64_t l2_bytes = 0;
  cudaStream_t stream = nullptr;
  std::shared_ptr<BlockCache> cache;
  // Page-locked host blocks for transfer staging (AllocateStaging): pinning
  // tens of MiB takes milliseconds and unpinning synchronizes the device.
  std::shared_ptr<BlockCache> pinned;
  gpu::DeviceHealth health;
};

// The device whose stream this thread is capturing into a graph. Nothing
// runs during a capture, so an error seen then says the captured work is not
// capturable, never that the context is broken: it must not mark the device
// unhealthy (real faults surface at the synchronisation after the capture).
thread_local const DeviceState* tls_capturing = nullptr;

class CaptureScope {
 public:
  explicit CaptureScope(const DeviceState* d) : prev_(tls_capturing) { tls_capturing = d; }
  ~CaptureScope() { tls_capturing = prev_; }
  CaptureScope(const CaptureScope&) = delete;
  CaptureScope& operator=(const CaptureScope&) = delete;

 private:
  const DeviceState* prev_;
};

// Two timing events, destroyed with the scope.
struct EventPair {
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  ~EventPair() {
    if (start != nullptr) (void)cudaEventDestroy(start);
    if (stop != nullptr) (void)cudaEventDestroy(stop);
  }
};

struct GraphHolder {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~GraphHolder() {
    if (exec != nullptr) (void)cudaGraphExecDestroy(exec);
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
  }
};

// Graph warm-up replays before the timed ones (uploads the graph, warms caches).
constexpr int kGraphWarmupReplays = 3;

// Device blocks that freed buffers leave behind, kept for reuse
// (common/block_cache.h). A server allocates every call's output: cudaMalloc
// of a large block costs ~0.1 ms and cudaFree synchronizes the whole device,
// which made a remote 16K attention call 37 % slower than the bare kernel on
// the H200 (bench/RESULTS.md, 2026-12-02). Sizes are bucketed (GpuBucket) and
// a block only serves its own bucket; when cudaMalloc fails the cache is
// released and the allocation retried, so caching never fails an allocation
// that plain cudaMalloc would have served. Reuse is safe in stream order: all
// work on a device runs on its one stream. Contents are not cleared, as with
// cudaMalloc (pools are zero-filled by the server; outputs are fully written).
size_t GpuBucket(size_t bytes) { return BlockCache::Bucket(bytes, 512); }

// A cache of `device`'s blocks that `free_block` returns to the runtime
// (cudaFree, or cudaFreeHost for page-locked host blocks). Freeing on a
// faulted context fails harmlessly; nothing to report to.
std::shared_ptr<BlockCache> MakeBlockCache(int device, size_t max_bytes, cudaError_t (*free_block)(void*)) {
  return std::make_shared<BlockCache>(max_bytes, [device, free_block](void* p, size_t) {
    if (cudaSetDevice(device) == cudaSuccess) (void)free_block(p);
  });
}

class GpuMemory : public DeviceMemory {
 public:
  GpuMemory(void* ptr, size_t size, size_t bucket, int device, std::shared_ptr<BlockCache> cache)
      : ptr_(ptr), size_(size), bucket_(bucket), device_(device), cache_(std::move(cache)) {}
  ~GpuMemory() override { cache_->Put(ptr_, bucket_); }
  void* data() const override { return ptr_; }
  size_t size() const override { return size_; }
  int device() const override { return device_; }

 private:
  void* ptr_;
  size_t size_;
  size_t bucket_;
  int device_;
  std::shared_ptr<BlockCache> cache_;  // may outlive the backend: buffers hold it
};

class GpuBackend : public Backend {
 public:
  explicit GpuBackend(std::vector<std::unique_ptr<DeviceState>> devices)
      : devices_(std::move(devices)) {}

  ~GpuBackend() override {
    for (auto& d : devices_) {
      if (d->stream != nullptr && cudaSetDevice(d->info.index) == cudaSuccess) {
        (void)cudaStreamDestroy(d->stream);
      }
    }
  }

  std::string Name() const override { return KS_GPU_VENDOR; }
  int DeviceCount() const override { return static_cast<int>(devices_.size()); }

  DeviceInfo GetDeviceInfo(int device) const override { return gpu::ReportDevice(devices_, Name(), device); }

  absl::StatusOr<std::unique_ptr<DeviceMemory>> Allocate(int device, size_t bytes) override {
    KS_ASSIGN_OR_RETURN(DeviceState * d, Enter(device));
    if (bytes == 0) bytes = 1;  // a valid, distinct pointer for empty tensors
    const size_t bucket = GpuBucket(bytes);
    void* ptr = d->cache->Take(bucket);
    if (ptr == nullptr) {
      cudaError_t e = cudaMalloc(&ptr, bucket);
      if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();  // out-of-memory is not sticky; clear it
        d->cache->Release();
        e = cudaMalloc(&ptr, bucket);
      }
      if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return Check(d, e, absl::StrCat("cudaMalloc(", bytes, " bytes) on device ", device));
      }
    }
    return std::unique_ptr<DeviceMemory>(new GpuMemory(ptr, bytes, bucket, device, d->cache));
  }

  absl::Status CopyToDevice(int device, void* dst, const void* src, size_t bytes) override {
    return Copy(device, dst, src, bytes, cudaMemcpyHostToDevice, "copy to device");
  }
  // Without room to pin, plain host memory (a slower copy, not a failure).
  absl::StatusOr<std::unique_ptr<StagingMemory>> AllocateStaging(int device, size_t bytes) override {
    KS_ASSIGN_OR_RETURN(DeviceState * d, Enter(device));
    const size_t bucket = GpuBucket(std::max<size_t>(bytes, 1));
    void* ptr = d->pinned->Take(bucket);
    if (ptr != nullptr) {
      auto block = std::make_unique<CachedStaging>(ptr, bytes, bucket, d->pinned);
      // A transfer that ended early may have left a copy from this block queued.
      KS_RETURN_IF_ERROR(Check(d, cudaStreamSynchronize(d->stream), "staging reuse"));
      return std::unique_ptr<StagingMemory>(std::move(block));
    }
    if (cudaHostAlloc(&ptr, bucket, cudaHostAllocPortable) != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky
      return Backend::AllocateStaging(device, bytes);
    }
    return std::unique_ptr<StagingMemory>(new CachedStaging(ptr, bytes, bucket, d->pinned));
  }
  absl::Status CopyToDeviceAsync(int device, void* dst, const void* src, size_t bytes) override {
    KS_ASSIGN_OR_RETURN(DeviceState * d, Enter(device));
    if (bytes == 0) return absl::OkStatus();
    return Check(d, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, d->stream), "copy to device");
  }
  absl::Status CopyToHost(int device, void* dst, const void* src, size_t bytes) override {
    return Copy(device, dst, src, bytes, cudaMemcpyDeviceToHost, "copy to host");
  }
  absl::Status CopyToHostAsync(int device, void* dst, const void* src, size_t bytes) override {
    KS_ASSIGN_OR_RETURN(DeviceState * d, Enter(device));
    if (bytes == 0) return absl::OkStatus();
    return Check(d, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, d->stream), "copy to host");
  }
  absl::Status CopyOnDevice(int device, void* dst, const void* src, size_t bytes) override {
    KS_ASSIGN_OR_RETURN(DeviceState * d, Enter(device));
    if (bytes == 0) return absl::OkStatus();
    return Check(d, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, d->stream),
                 "device-to-device copy");
  }

  absl::Status Synchronize(int device) override {
    KS_ASSIGN_OR_RETURN(DeviceState * d, Enter(device));
    return Check(d, cudaStreamSynchronize(d->stream), "stream synchronize");
  }

  // Every op goes through its variant table: the first kernel that serves
  // the call and that the dispatcher does not pass over runs it.
  absl::Status Attention(int device, const AttentionParams& p, const TensorView& q,
                         const TensorView& k, const TensorView& v, TensorView& out) override {
    return Dispatch(device, MakeOpCall(p, q, k, v), out);
  }

  absl::Status Fp8Attention(int device, const Fp8AttentionParams& p, const Fp8AttentionInputs& in,
                            TensorView& out) override {
    return Dispatch(device, MakeOpCall(p, in), out);
  }

  absl::Status MlaDecode(int device, const MlaDecodeParams& p, const MlaDecodeInputs& in,
                         TensorView& out) override {
    return Dispatch(device, MakeOpCall(p, in), out);
  }

  absl::Status Moe(int device, const MoeParams& p, const MoeInputs& in, TensorView& out) override {
    return Dispatch(device, MakeOpCall(p, in), out);
  }

  // One kernel per KV format (no variant table: decode attention is not a
  // benchmark-job op); the pool is read where it lives.
  absl::Status DecodeAttention(int device, const DecodeAttentionParams& p, const DecodeAttentionInputs& in,
                               TensorView& out) override {
    KS_ASSIGN_OR_RETURN(DeviceState * d, Enter(device));
    const std::string no = gpu::DecodeAttentionUnsupported(d->caps.cc_major, d->caps.cc_minor, p);
    if (!no.empty()) return absl::UnimplementedError(no);
    return AfterLaunch(d, gpu::RunDecodeAttention(p, in, out, d->stream));
  }

  BackendCapabilities Capabilities() const override {
    BackendCapabilities c;
    c.device_timer = true;
    c.graph_replay = true;
    c.timer = KS_GPU_VENDOR " events around the launches";
    for (const auto& d : devices_) c.cache_bytes = std::max<int64_t>(c.cache_bytes, d->l2_bytes);
    return c;
  }

  std::vector<KernelVariantInfo> KernelVariants() const override {
    std::vector<KernelVariantInfo> out;
    for (BenchOp op : kAllBenchOps) {
      if (op == BenchOp::kMoeDown || op == BenchOp::kMoeLayer) continue;  // one MoE table for every stage
      for (const gpu::KernelVariant& v : Table(op)) {
        out.push_back({op, v.name, v.description, v.serves});
      }
    }
    return out;
  }

  absl::Status RunKernelVariant(int device, absl::string_view name, const OpCall& call, TensorView& out) override {
    KS_ASSIGN_OR_RETURN(DeviceState * d, Enter(device));
    KS_ASSIGN_OR_RETURN(const gpu::KernelVariant* v,
                        gpu::FindVariant(Table(call.op), BenchOpName(call.op), name, d->caps, call));
    return AfterLaunch(d, v->run(call, out, d->stream));
  }

  absl::StatusOr<double> TimeLaunches(int device, const std::function<absl::Status()>& launch,
                                      int n) override {
    if (n <= 0) return absl::InvalidArgumentError(absl::StrCat("TimeLaunches: n must be > 0, got ", n));
    KS_ASSIGN_OR_RETURN(DeviceState * d, Enter(device));
    EventPair ev;
    KS_RETURN_IF_ERROR(CreateEvents(d, &ev));
    KS_RETURN_IF_ERROR(Check(d, cudaEventRecord(ev.start, d->stream), "cudaEventRecord"));
    for (int i = 0; i < n; ++i) KS_RETURN_IF_ERROR(launch());
    return ElapsedMs(d, ev, n);
  }

  // Eleven 8192^3 cuBLAS GEMMs, tens of milliseconds: not worth polling `cancelled`.
  absl::StatusOr<GemmCeiling> MeasureGemmCeiling(int device, const std::function<bool()>& cancelled) override {
    (void)cancelled;
    KS_ASSIGN_OR_RETURN(DeviceState * d, Enter(device));
    KS_RETURN_IF_ERROR(Check(d, cudaStreamSynchronize(d->stream), "stream synchronize before the GEMM ceiling"));
    KS_ASSIGN_OR_RETURN(gpu::GemmRate rate, gpu::MeasureCublasBf16Gemm(d->stream));
    return GemmCeiling{rate.tflops, rate.desc};
  }

  absl::StatusOr<double> TimeGraphReplays(int device, const std::function<absl::Status()>& launch,
                                          int replays) override {
    if (replays <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("TimeGraphReplays: replays must be > 0, got ", replays));
    }
    KS_ASSIGN_OR_RETURN(DeviceState * d, Enter(device));
    // Faults of earlier work surface here, outside the capture, where they count.
    KS_RETURN_IF_ERROR(Check(d, cudaStreamSynchronize(d->stream), "stream synchronize before graph capture"));
    GraphHolder g;
    {
      // Thread-local mode: an unsafe call (cudaMalloc, a synchronous copy) on
      // this thread fails the capture; other threads' devices are untouched.
      KS_RETURN_IF_ERROR(Check(d, cudaStreamBeginCapture(d->stream, cudaStreamCaptureModeThreadLocal),
                               "cudaStreamBeginCapture"));
      absl::Status launched;
      {
        CaptureScope scope(d);
        launched = launch();
      }
      const cudaError_t end = cudaStreamEndCapture(d->stream, &g.graph);
      (void)cudaGetLastError();  // capture errors are not sticky; leave none behind
      cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
      if (cudaStreamIsCapturing(d->stream, &capturing) != cudaSuccess ||
          capturing != cudaStreamCaptureStatusNone) {
        (void)cudaGetLastError();
        return absl::InternalError(absl::StrCat(KS_GPU_VENDOR " device ", device,
                                                ": the stream is still capturing after cudaStreamEndCapture"));
      }
      // The stream is usable again; a real fault would show here and count.
      KS_RETURN_IF_ERROR(Check(d, cudaStreamSynchronize(d->stream), "stream synchronize after graph capture"));
      if (!launched.ok()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "graph capture on " KS_GPU_VENDOR " device ", device,
            ": the launch failed while being captured (an op that synchronises, copies to the host or "
            "allocates outside the stream cannot be captured): ",
            launched.ToString()));
      }
      if (end != cudaSuccess || g.graph == nullptr) {
        return absl::FailedPreconditionError(absl::StrCat(
            "graph capture on " KS_GPU_VENDOR " device ", device, ": cudaStreamEndCapture: ",
            end == cudaSuccess ? "no graph" : cudaGetErrorName(end), " (",
            end == cudaSuccess ? "empty capture" : cudaGetErrorString(end),
            "); the launch did something that cannot be captured"));
      }
    }
    {
      const cudaError_t e = cudaGraphInstantiateWithFlags(&g.exec, g.graph, 0);
      if (e != cudaSuccess) {
        g.exec = nullptr;
        (void)cudaGetLastError();
        if (IsStickyError(e)) return Check(d, e, "cudaGraphInstantiate");
        return absl::FailedPreconditionError(absl::StrCat("graph capture on " KS_GPU_VENDOR " device ", device,
                                                          ": cudaGraphInstantiate: ", cudaGetErrorName(e),
                                                          " (", cudaGetErrorString(e), ")"));
      }
    }
    for (int i = 0; i < kGraphWarmupReplays; ++i) {
      KS_RETURN_IF_ERROR(Check(d, cudaGraphLaunch(g.exec, d->stream), "cudaGraphLaunch (warm-up)"));
    }
    EventPair ev;
    KS_RETURN_IF_ERROR(CreateEvents(d, &ev));
    KS_RETURN_IF_ERROR(Check(d, cudaEventRecord(ev.start, d->stream), "cudaEventRecord"));
    for (int i = 0; i < replays; ++i) {
      KS_RETURN_IF_ERROR(Check(d, cudaGraphLaunch(g.exec, d->stream), "cudaGraphLaunch"));
    }
    return ElapsedMs(d, ev, replays);
  }

 private:
  static const gpu::VariantTable& Table(BenchOp op) {
    switch (op) {
      case BenchOp::kAttention:
        return gpu::AttentionVariants();
      case BenchOp::kFp8Attention:
        return gpu::Fp8AttentionVariants();
      case BenchOp::kMlaDecode:
        return gpu::MlaDecodeVariants();
      case BenchOp::kMoeGateUp:
      case BenchOp::kMoeDown:
      case BenchOp::kMoeLayer:
        break;
    }
    return gpu::MoeVariants();
  }

  absl::Status Dispatch(int device, const OpCall& call, TensorView& out) {
    KS_ASSIGN_OR_RETURN(DeviceState * d, Enter(device));
    return AfterLaunch(d, gpu::RunSelected(Table(call.op), BenchOpName(call.op), d->caps, call, out, d->stream));
  }

  // Checks the index and health, and makes the device current.
  absl::StatusOr<DeviceState*> Enter(int device) {
    KS_ASSIGN_OR_RETURN(DeviceState * d, gpu::HealthyDevice(devices_, KS_GPU_VENDOR, device));
    KS_RETURN_IF_ERROR(Check(d, cudaSetDevice(device), "cudaSetDevice"));
    return d;
  }

  // Turns a CUDA error into a status; a sticky one marks the device unhealthy.
  absl::Status Check(DeviceState* d, cudaError_t e, absl::string_view what) {
    if (e == cudaSuccess) return absl::OkStatus();
    absl::Status s = GpuStatus(e, absl::StrCat(what, " on " KS_GPU_VENDOR " device ", d->info.index));
    if (IsStickyError(e)) MarkUnhealthy(d, s.message());
    return s;
  }

  // Not while this thread captures the device's stream (see tls_capturing).
  void MarkUnhealthy(DeviceState* d, absl::string_view reason) {
    if (tls_capturing == d) return;
    d->health.MarkUnhealthy(reason);
  }

  absl::Status CreateEvents(DeviceState* d, EventPair* ev) {
    KS_RETURN_IF_ERROR(Check(d, cudaEventCreate(&ev->start), "cudaEventCreate"));
    return Check(d, cudaEventCreate(&ev->stop), "cudaEventCreate");
  }

  // Records ev.stop after the queued work, waits for it, and returns the mean
  // milliseconds of `n` items since ev.start.
  absl::StatusOr<double> ElapsedMs(DeviceState* d, const EventPair& ev, int n) {
    KS_RETURN_IF_ERROR(Check(d, cudaEventRecord(ev.stop, d->stream), "cudaEventRecord"));
    KS_RETURN_IF_ERROR(Check(d, cudaEventSynchronize(ev.stop), "cudaEventSynchronize"));
    float ms = 0;
    KS_RETURN_IF_ERROR(Check(d, cudaEventElapsedTime(&ms, ev.start, ev.stop), "cudaEventElapsedTime"));
    return static_cast<double>(ms) / n;
  }

  // A launcher's own status (bad arguments) passes through; then any launch
  // error, or a sticky fault from earlier asynchronous work, is picked up.
  absl::Status AfterLaunch(DeviceState* d, absl::Status launched) {
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return Check(d, e, "kernel launch");
    if (!launched.ok() && launched.code() == absl::StatusCode::kUnavailable) {
      // The launcher saw a sticky error itself (it returns UNAVAILABLE for those).
      MarkUnhealthy(d, launched.message());
    }
    return launched;
  }

  absl::Status Copy(int device, void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                    absl::string_view what) {
    KS_ASSIGN_OR_RETURN(DeviceState * d, Enter(device));
    if (bytes == 0) return absl::OkStatus();
    KS_RETURN_IF_ERROR(Check(d, cudaMemcpyAsync(dst, src, bytes, kind, d->stream), what));
    // Host buffers are the caller's: the copy must be complete on return.
    return Check(d, cudaStreamSynchronize(d->stream), what);
  }

  std::vector<std::unique_ptr<DeviceState>> devices_;
};

absl::StatusOr<std::unique_ptr<DeviceState>> OpenDevice(int index, const std::string& driver) {
  auto d = std::make_unique<DeviceState>();
  KS_RETURN_IF_ERROR(GpuStatus(cudaSetDevice(index), "cudaSetDevice"));
  cudaDeviceProp prop;
  KS_RETURN_IF_ERROR(GpuStatus(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties"));
  int clock_khz = 0, mem_clock_khz = 0;
  KS_RETURN_IF_ERROR(GpuStatus(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, index),
                               "cudaDeviceGetAttribute(clock rate)"));
  KS_RETURN_IF_ERROR(
      GpuStatus(cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, index),
                "cudaDeviceGetAttribute(memory clock rate)"));
  d->info.index = index;
  d->info.backend = KS_GPU_VENDOR;
  d->info.name = absl::StrCat(prop.name, " (sm_", prop.major, prop.minor, ")");
  d->info.memory_total_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  d->info.compute_units = prop.multiProcessorCount;
  d->info.clock_mhz = clock_khz / 1000;
  d->info.memory_clock_mhz = mem_clock_khz / 1000;
  d->info.driver = driver;
  KS_ASSIGN_OR_RETURN(d->caps, gpu::QueryDeviceCaps(index));
  d->l2_bytes = prop.l2CacheSize;
  KS_RETURN_IF_ERROR(GpuStatus(cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking),
                               "cudaStreamCreate"));
  // Up to 1/16 of the device (8 GiB on an H200) stays cached for reuse.
  d->cache = MakeBlockCache(index, std::min<size_t>(prop.totalGlobalMem / 16, size_t{8} << 30), cudaFree);
  // Enough for a few uploads' double-buffered staging (server/buffer_service.cc).
  d->pinned = MakeBlockCache(index, size_t{128} << 20, cudaFreeHost);
  return d;
}

std::string VersionString(int v) { return absl::StrCat(v / 1000, ".", (v % 1000) / 10); }

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> KS_GPU_CREATE_BACKEND() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::UnavailableError(absl::StrCat("no " KS_GPU_VENDOR_NAME " device: ", cudaGetErrorString(e)));
  }
  if (count <= 0) return absl::UnavailableError("no " KS_GPU_VENDOR_NAME " device: none found");
  int driver_version = 0, runtime_version = 0;
  KS_RETURN_IF_ERROR(GpuStatus(cudaDriverGetVersion(&driver_version), "cudaDriverGetVersion"));
  KS_RETURN_IF_ERROR(GpuStatus(cudaRuntimeGetVersion(&runtime_version), "cudaRuntimeGetVersion"));
  const std::string driver = absl::StrCat("CUDA driver ", VersionString(driver_version),
                                          ", runtime ", VersionString(runtime_version));
  std::vector<std::unique_ptr<DeviceState>> devices;
  for (int i = 0; i < count; ++i) {
    auto d = OpenDevice(i, driver);
    if (!d.ok()) {
      return absl::UnavailableError(
          absl::StrCat("no " KS_GPU_VENDOR_NAME " device: device ", i, ": ", d.status().message()));
    }
    devices.push_back(std::move(d).value());
  }
  return std::unique_ptr<Backend>(new GpuBackend(std::move(devices)));
}

}  // namespace kernelserve
