// The one interface between the server and the kernels (DESIGN §1). The
// server sees only this header and ops.h; a backend owns its devices, their
// memory and their kernels. Every method returns a status; none may abort on
// bad input or a device fault. Ops assume their params were validated (the
// server calls Validate first) and return UNIMPLEMENTED naming a case they lack.
#ifndef KERNELSERVE_KERNELS_API_BACKEND_H_
#define KERNELSERVE_KERNELS_API_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/block_cache.h"
#include "kernels/api/op_call.h"
#include "kernels/api/ops.h"
#include "kernels/api/tensor.h"

namespace kernelserve {

struct DeviceInfo {
  int index = 0;
  std::string backend;  // "cpu", "cuda", "hip"
  std::string name;
  int64_t memory_total_bytes = 0;
  int compute_units = 0;  // SMs, CUs or CPU threads
  int clock_mhz = 0;
  int memory_clock_mhz = 0;
  std::string driver;
  bool healthy = true;
  std::string health_reason;  // why not healthy
};

// What GetDeviceInfo answers for an index the backend does not have.
inline DeviceInfo NoSuchDevice(absl::string_view backend, int device) {
  DeviceInfo none;
  none.index = device;
  none.backend = std::string(backend);
  none.healthy = false;
  none.health_reason = "no such device";
  return none;
}

// One backend a binary may carry. A GPU backend is compiled in only when its
// toolchain was found when the build was configured (bazel/gpu_configure.bzl),
// so the same source tree builds on any machine; kernels/backends.h lists them.
struct BackendBuild {
  std::string name;  // "cpu", "cuda", "hip"
  bool built = false;
  // The toolchain it was built with, or why it is not in this binary and how
  // to get it.
  std::string note;
};

// One entry of a backend's variant table for an op (for the GPU backend,
// kernels/gpu/<op>/<op>_variants.cc): a kernel the backend's own dispatch
// selects for some shapes, runnable by name for tests, benchmarks and
// benchmark jobs ("<backend>.<name>").
struct KernelVariantInfo {
  BenchOp op = BenchOp::kAttention;  // the MoE entries serve every MoE stage they name in `serves`
  std::string name;                  // stable within the op, e.g. "wgmma_ws"
  std::string description;           // one line
  std::string serves;                // the devices and shapes it serves
};

// What the server may rely on, asked for instead of comparing backend names.
struct BackendCapabilities {
  bool device_timer = false;   // TimeLaunches measures with device events
  bool graph_replay = false;   // TimeGraphReplays captures and replays device graphs
  int64_t cache_bytes = 0;     // the last-level cache an L2 flush must cover (0: none to flush)
  std::string timer;           // how launches are timed, for job results
  // Device memory is host memory (the cpu backend): a transfer copies
  // straight into it, with no staging in between.
  bool device_memory_is_host = false;
};

// Host memory for staging transfers (Backend::AllocateStaging), freed or
// handed back to the backend on destruction.
class StagingMemory {
 public:
  virtual ~StagingMemory() = default;
  virtual void* data() const = 0;
  virtual size_t size() const = 0;
};

// A staging block from a backend's BlockCache (page-locked host memory on
// GPU backends, reused host blocks on the cpu backend), back in the cache on
// destruction.
class CachedStaging final : public StagingMemory {
 public:
  CachedStaging(void* data, size_t size, size_t bucket, std::shared_ptr<BlockCache> cache)
      : data_(data), size_(size), bucket_(bucket), cache_(std::move(cache)) {}
  ~CachedStaging() override { cache_->Put(data_, bucket_); }
  CachedStaging(const CachedStaging&) = delete;
  CachedStaging& operator=(const CachedStaging&) = delete;

  void* data() const override { return data_; }
  size_t size() const override { return size_; }

 private:
  void* data_;
  size_t size_;
  size_t bucket_;
  std::shared_ptr<BlockCache> cache_;
};

// Memory on one device, freed on destruction.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual void* data() const = 0;
  virtual size_t size() const = 0;
  virtual int device() const = 0;
};

class Backend {
 private:
  class HeapStaging final : public StagingMemory {
   public:
    explicit HeapStaging(size_t bytes) : bytes_(new char[bytes]), size_(bytes) {}
    void* data() const override { return bytes_.get(); }
    size_t size() const override { return size_; }

   private:
    std::unique_ptr<char[]> bytes_;
    size_t size_;
  };

 public:
  virtual ~Backend() = default;

  virtual std::string Name() const = 0;  // "cpu", "cuda", "hip"
  virtual int DeviceCount() const = 0;
  virtual BackendCapabilities Capabilities() const { return {}; }
  virtual DeviceInfo GetDeviceInfo(int device) const = 0;

  // Memory. Views handed to ops point into memory from Allocate.
  virtual absl::StatusOr<std::unique_ptr<DeviceMemory>> Allocate(int device, size_t bytes) = 0;
  virtual absl::Status CopyToDevice(int device, void* dst, const void* src, size_t bytes) = 0;
  virtual absl::Status CopyToHost(int device, void* dst, const void* src, size_t bytes) = 0;
  // Host memory that copies to `device` run fastest from: page-locked on GPU
  // backends (a copy from pageable memory goes through the driver's small
  // bounce buffers, synchronously). Plain host memory by default. Call from a
  // device task.
  virtual absl::StatusOr<std::unique_ptr<StagingMemory>> AllocateStaging(int device, size_t bytes) {
    (void)device;
    return std::unique_ptr<StagingMemory>(new HeapStaging(bytes));
  }
  // Queues a copy from staging memory to the device and may return before it
  // is done: `src` must stay as it is until Synchronize(device) returns. By
  // default the copy is done on return.
  virtual absl::Status CopyToDeviceAsync(int device, void* dst, const void* src, size_t bytes) {
    return CopyToDevice(device, dst, src, bytes);
  }
  // Queues a copy from the device into staging memory and may return before
  // it is done: read `dst` only after Synchronize(device) returns. By default
  // the copy is done on return.
  virtual absl::Status CopyToHostAsync(int device, void* dst, const void* src, size_t bytes) {
    return CopyToHost(device, dst, src, bytes);
  }
  // Device-to-device copy within one device.
  virtual absl::Status CopyOnDevice(int device, void* dst, const void* src, size_t bytes) = 0;
  // Waits for all work queued on the device; reports faults.
  virtual absl::Status Synchronize(int device) = 0;

  // Ops. `out` is allocated by the caller with the params' OutputDesc().
  virtual absl::Status Attention(int device, const AttentionParams& p, const TensorView& q,
                                 const TensorView& k, const TensorView& v, TensorView& out) = 0;
  virtual absl::Status Fp8Attention(int device, const Fp8AttentionParams& p,
                                    const Fp8AttentionInputs& in, TensorView& out) = 0;
  virtual absl::Status MlaDecode(int device, const MlaDecodeParams& p, const MlaDecodeInputs& in,
                                 TensorView& out) = 0;
  virtual absl::Status Moe(int device, const MoeParams& p, const MoeInputs& in, TensorView& out) = 0;
  // Decode attention over a PER_HEAD_KV pool; `in.kv` is the pool's memory,
  // read in place. Not every backend has it: the default says so.
  virtual absl::Status DecodeAttention(int device, const DecodeAttentionParams& p,
                                       const DecodeAttentionInputs& in, TensorView& out) {
    (void)device;
    (void)p;
    (void)in;
    (void)out;
    return absl::UnimplementedError(absl::StrCat(
        "decode attention (per-head KV pools): backend ", Name(),
        " has no kernel for it; the cpu backend (--backend=cpu) has one"));
  }

  // The backend's variant tables, every op (empty: the backend has one
  // kernel per op, run by the op methods above).
  virtual std::vector<KernelVariantInfo> KernelVariants() const { return {}; }
  // Runs the entry `name` of the variant table of call.op on `call` (views on
  // `device`). NOT_FOUND for a name the table lacks; UNIMPLEMENTED saying
  // why when the entry does not serve the call.
  virtual absl::Status RunKernelVariant(int device, absl::string_view name, const OpCall& call, TensorView& out) {
    (void)device;
    (void)call;
    (void)out;
    return absl::NotFoundError(absl::StrCat("backend ", Name(), " has no kernel variant \"", name, "\""));
  }

  // Optional device-side timing (benchmark jobs, DESIGN §6). `launch` queues
  // one op call on `device` through this backend (and nothing on the host
  // that must finish first). A backend without the facility returns
  // UNIMPLEMENTED without calling `launch`; an error of `launch` itself
  // comes back as is.
  //
  // Mean device milliseconds per launch over `n` back-to-back launches,
  // measured with device events around them (no synchronisation between).
  virtual absl::StatusOr<double> TimeLaunches(int device, const std::function<absl::Status()>& launch,
                                              int n) {
    (void)device;
    (void)launch;
    (void)n;
    return absl::UnimplementedError(
        absl::StrCat("backend ", Name(), " has no device-event timing (TimeLaunches)"));
  }
  // Captures one call of `launch` into a device graph, warms it up with a few
  // replays, then returns the mean device milliseconds per replay over
  // `replays` replays. An op that cannot be captured (it synchronises, copies
  // to the host, allocates outside the stream) gives FAILED_PRECONDITION
  // naming it; the device stays usable and healthy.
  virtual absl::StatusOr<double> TimeGraphReplays(int device, const std::function<absl::Status()>& launch,
                                                  int replays) {
    (void)device;
    (void)launch;
    (void)replays;
    return absl::UnimplementedError(
        absl::StrCat("backend ", Name(), " has no graph capture (TimeGraphReplays)"));
  }

  // Optional: the device's dense GEMM rate, the ceiling benchmark results
  // are compared with (DESIGN §6), measured on an otherwise idle device with
  // the backend's best GEMM: the vendor's library on cuda (bf16), a blocked
  // fp32 GEMM on cpu. The server cannot measure it itself: it sees no kernels
  // but these. `cancelled` (may be empty) may be polled between GEMM runs;
  // true ends the measurement with CANCELLED (the cpu one takes a fraction
  // of a second, so a job cancelled meanwhile stops at once).
  // UNIMPLEMENTED or UNAVAILABLE (library missing) where there is none.
  struct GemmCeiling {
    double tflops = 0;
    std::string desc;  // how it was measured
  };
  virtual absl::StatusOr<GemmCeiling> MeasureGemmCeiling(int device, const std::function<bool()>& cancelled) {
    (void)device;
    (void)cancelled;
    return absl::UnimplementedError(absl::StrCat("backend ", Name(), " has no GEMM ceiling measurement"));
  }
};

}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_API_BACKEND_H_
