#include "kernels/cpu/cpu_backend.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <new>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/block_cache.h"
#include "common/huge_pages.h"
#include "common/status_macros.h"
#include "kernels/cpu/cpu_gemm.h"
#include "kernels/cpu/cpu_kernels.h"

namespace kernelserve {
namespace {

constexpr size_t kAlignment = 64;

// Kernels allocate fp32 working copies; running out of host memory becomes a
// status rather than an exception crossing the backend boundary.
template <typename F>
absl::Status Guarded(const char* op, F&& f) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(op, ": out of host memory for the cpu backend's buffers"));
  }
}

// The devices beyond 0 are simulated (--cpu_devices): the same host memory
// and threads, each its own worker and queue in the server, so placement
// across devices runs without a GPU.
absl::Status CheckDevice(int device, int devices) {
  if (device < 0 || device >= devices) {
    return absl::InvalidArgumentError(devices == 1 ? absl::StrCat("cpu backend has one device (0), not device ", device)
                                                   : absl::StrCat("cpu backend has devices 0..", devices - 1,
                                                                  ", not device ", device));
  }
  return absl::OkStatus();
}

class HostMemory : public DeviceMemory {
 public:
  // `mapped_bytes` > 0: `data` is an mmap of that many bytes, else malloc'd.
  HostMemory(int device, void* data, size_t size, size_t mapped_bytes = 0)
      : device_(device), data_(data), size_(size), mapped_bytes_(mapped_bytes) {}
  ~HostMemory() override {
    if (mapped_bytes_ > 0) {
      munmap(data_, mapped_bytes_);
    } else {
      std::free(data_);
    }
  }
  HostMemory(const HostMemory&) = delete;
  HostMemory& operator=(const HostMemory&) = delete;

  void* data() const override { return data_; }
  size_t size() const override { return size_; }
  int device() const override { return device_; }

 private:
  int device_;
  void* data_;
  size_t size_;
  size_t mapped_bytes_;
};

// Host blocks for download staging, kept for the next download
// (common/block_cache.h): a block faulted in afresh for every batch costs a
// page fault per 4 KiB, and under a hypervisor that exits on each (the
// development VM: a fresh 64 MiB memcpy destination runs at 0.39 GB/s, a
// warm one at 16.7) the faults, not the copies, set a download's rate.
// Buckets from 4 KiB; from a huge page on, each block is its own mapping in
// transparent huge pages.
void* NewStagingBlock(size_t bucket) {
  if (bucket < kHugePageBytes) return std::aligned_alloc(kAlignment, bucket);
  void* p = mmap(nullptr, bucket, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  AdviseHugePages(p, bucket);
  return p;
}

void FreeStagingBlock(void* p, size_t bucket) {
  if (bucket < kHugePageBytes) {
    std::free(p);
  } else {
    munmap(p, bucket);
  }
}

// Value of the first "key : value" line of /proc/cpuinfo with that key.
std::string CpuInfoField(const std::string& key) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::pair<std::string, std::string> kv = absl::StrSplit(line, absl::MaxSplits(':', 1));
    if (absl::StripAsciiWhitespace(kv.first) == key) {
      return std::string(absl::StripAsciiWhitespace(kv.second));
    }
  }
  return "";
}

class CpuBackend : public Backend {
 public:
  CpuBackend(int num_threads, int num_devices) : devices_(num_devices < 1 ? 1 : num_devices) {
    const int hw = static_cast<int>(std::thread::hardware_concurrency());
    threads_ = num_threads > 0 ? num_threads : (hw > 0 ? hw : 1);
    info_.index = 0;
    info_.backend = "cpu";
    info_.name = CpuInfoField("model name");
    if (info_.name.empty()) info_.name = "cpu";
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long page_size = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page_size > 0) {
      info_.memory_total_bytes = static_cast<int64_t>(pages) * page_size;
    }
    info_.compute_units = threads_;
    const std::string mhz = CpuInfoField("cpu MHz");
    info_.clock_mhz = mhz.empty() ? 0 : std::atoi(mhz.c_str());
    info_.driver = "";
    info_.healthy = true;
  }

  std::string Name() const override { return "cpu"; }
  int DeviceCount() const override { return devices_; }
  // No device timer or graphs: launches are host calls, timed on the host
  // clock. cache_bytes is what an L2 flush copies: 64 MiB, far more than a
  // core's L2 and most L3s; the whole last-level cache of a big server CPU
  // (several hundred MiB) would make each flush cost more than the launches
  // it separates.
  BackendCapabilities Capabilities() const override {
    BackendCapabilities c;
    c.device_timer = false;
    c.graph_replay = false;
    c.cache_bytes = int64_t{64} << 20;
    c.timer = "host clock around synchronised launches";
    c.device_memory_is_host = true;
    return c;
  }
  DeviceInfo GetDeviceInfo(int device) const override {
    DeviceInfo info = info_;
    info.index = device;
    if (device < 0 || device >= devices_) {
      info.healthy = false;
      info.health_reason = absl::StrCat("no cpu device ", device);
    }
    return info;
  }

  absl::StatusOr<std::unique_ptr<DeviceMemory>> Allocate(int device, size_t bytes) override {
    KS_RETURN_IF_ERROR(CheckDevice(device, devices_));
    // aligned_alloc wants a multiple of the alignment; a 0-byte request still
    // gets a unique, valid pointer.
    const size_t rounded = bytes == 0 ? kAlignment : (bytes + kAlignment - 1) / kAlignment * kAlignment;
    if (rounded < bytes) {
      return absl::ResourceExhaustedError(absl::StrCat("cpu allocation of ", bytes, " bytes overflows"));
    }
    // At and above a huge page a buffer is its own mapping in transparent
    // huge pages: a 512 MiB upload then takes 256 page faults instead of
    // 131072 (faults were most of the upload's time), and kernels miss the
    // TLB less.
    if (rounded >= kHugePageBytes) {
      const size_t mapped = (rounded + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
      void* data = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (data == MAP_FAILED) {
        return absl::ResourceExhaustedError(absl::StrCat("cpu allocation of ", bytes, " bytes failed"));
      }
      AdviseHugePages(data, mapped);
      return std::unique_ptr<DeviceMemory>(new HostMemory(device, data, bytes, mapped));
    }
    void* data = std::aligned_alloc(kAlignment, rounded);
    if (data == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat("cpu allocation of ", bytes, " bytes failed"));
    }
    return std::unique_ptr<DeviceMemory>(new HostMemory(device, data, bytes));
  }

  absl::Status CopyToDevice(int device, void* dst, const void* src, size_t bytes) override {
    return Copy(device, dst, src, bytes);
  }
  // The slices a download sends own these blocks, so a block comes back when
  // the transport is done with it, from whichever thread that is.
  absl::StatusOr<std::unique_ptr<StagingMemory>> AllocateStaging(int device, size_t bytes) override {
    KS_RETURN_IF_ERROR(CheckDevice(device, devices_));
    const size_t bucket = BlockCache::Bucket(std::max<size_t>(bytes, 1), 4096);
    void* data = staging_->Take(bucket);
    if (data == nullptr) data = NewStagingBlock(bucket);
    if (data == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat("cpu staging block of ", bytes, " bytes: out of host memory"));
    }
    return std::unique_ptr<StagingMemory>(new CachedStaging(data, bytes, bucket, staging_));
  }
  absl::Status CopyToHost(int device, void* dst, const void* src, size_t bytes) override {
    return Copy(device, dst, src, bytes);
  }
  absl::Status CopyOnDevice(int device, void* dst, const void* src, size_t bytes) override {
    return Copy(device, dst, src, bytes);
  }
  absl::Status Synchronize(int device) override {
    KS_RETURN_IF_ERROR(CheckDevice(device, devices_));
    return absl::OkStatus();  // every op runs to completion before it returns
  }

  absl::Status Attention(int device, const AttentionParams& p, const TensorView& q,
                         const TensorView& k, const TensorView& v, TensorView& out) override {
    KS_RETURN_IF_ERROR(CheckDevice(device, devices_));
    if (q.empty() || k.empty() || v.empty() || out.empty()) {
      return absl::InvalidArgumentError("attention: a tensor has no data");
    }
    const int threads = ThreadsFor(4.0 * p.batch * p.heads_q * p.seq_q * p.seq_kv * p.head_dim);
    return Guarded("attention", [&] { return cpu::Attention(p, q, k, v, out, threads); });
  }
  absl::Status Fp8Attention(int device, const Fp8AttentionParams& p, const Fp8AttentionInputs& in,
                            TensorView& out) override {
    KS_RETURN_IF_ERROR(CheckDevice(device, devices_));
    if (in.q.empty() || in.k.empty() || in.v.empty() || out.empty()) {
      return absl::InvalidArgumentError("fp8 attention: a tensor has no data");
    }
    const int threads = ThreadsFor(2.0 * p.batch * p.heads_q * p.seq_q * p.seq_kv * (p.d_qk + p.d_v));
    return Guarded("fp8 attention", [&] { return cpu::Fp8Attention(p, in, out, threads); });
  }
  absl::Status MlaDecode(int device, const MlaDecodeParams& p, const MlaDecodeInputs& in,
                         TensorView& out) override {
    KS_RETURN_IF_ERROR(CheckDevice(device, devices_));
    if (in.q_lat.empty() || in.q_pe.empty() || in.kv.empty() || out.empty()) {
      return absl::InvalidArgumentError("mla decode: a tensor has no data");
    }
    const int threads = ThreadsFor(2.0 * p.batch * p.q_len * p.heads * p.max_seq * (576 + 512));
    return Guarded("mla decode", [&] { return cpu::MlaDecode(p, in, out, threads); });
  }
  absl::Status DecodeAttention(int device, const DecodeAttentionParams& p, const DecodeAttentionInputs& in,
                               TensorView& out) override {
    KS_RETURN_IF_ERROR(CheckDevice(device, devices_));
    if (in.q.empty() || in.kv.empty() || out.empty()) {
      return absl::InvalidArgumentError("decode attention: a tensor has no data");
    }
    const int threads = ThreadsFor(4.0 * p.batch * p.q_len * p.heads_q * p.max_seq * p.head_dim);
    return Guarded("decode attention", [&] { return cpu::DecodeAttention(p, in, out, threads); });
  }
  // The ceiling for "% GEMM": a packed, cache-blocked fp32 GEMM with the
  // ops' thread count and the widest vectors this CPU has (kernels/cpu/cpu_gemm.h),
  // at a size with work for every thread (1152^3 is ~3 GFLOP, 48 work items).
  absl::StatusOr<GemmCeiling> MeasureGemmCeiling(int device, const std::function<bool()>& cancelled) override {
    KS_RETURN_IF_ERROR(CheckDevice(device, devices_));
    const int64_t n = threads_ <= 8 ? 1152 : threads_ <= 32 ? 2304 : 3456;
    absl::StatusOr<cpu::GemmRate> rate;
    KS_RETURN_IF_ERROR(Guarded("gemm ceiling", [&] {
      rate = cpu::MeasureSgemm(n, 3, threads_, cancelled);
      return rate.status();
    }));
    return GemmCeiling{rate->tflops, rate->desc};
  }
  absl::Status Moe(int device, const MoeParams& p, const MoeInputs& in, TensorView& out) override {
    KS_RETURN_IF_ERROR(CheckDevice(device, devices_));
    if (in.x.empty() || in.topk_ids.empty() || out.empty()) {
      return absl::InvalidArgumentError("moe: a tensor has no data");
    }
    const int threads = ThreadsFor(6.0 * p.tokens * p.top_k * p.inter * std::max(p.hidden, p.out_dim));
    return Guarded("moe", [&] { return cpu::Moe(p, in, out, threads); });
  }

 private:
  absl::Status Copy(int device, void* dst, const void* src, size_t bytes) {
    KS_RETURN_IF_ERROR(CheckDevice(device, devices_));
    if (bytes == 0) return absl::OkStatus();
    if (dst == nullptr || src == nullptr) {
      return absl::InvalidArgumentError("cpu copy with a null pointer");
    }
    std::memmove(dst, src, bytes);
    return absl::OkStatus();
  }

  // An op this small runs on the calling thread: waking the other OpenMP
  // threads costs ~0.05 ms on an idle machine and up to a scheduler time slice
  // (milliseconds) when the cores are busy, more than the op itself (a
  // 1x1x16x64 attention: 0.02 ms on one thread, 9 ms median with two on the
  // loaded 2-core VM, bench/NOTES.md 2026-12-03). 4 MFLOP is ~0.3 ms on one
  // core here.
  static constexpr double kSerialFlops = 4e6;
  int ThreadsFor(double flops) const { return flops < kSerialFlops ? 1 : threads_; }

  int devices_;
  int threads_;
  DeviceInfo info_;
  // Two 16 MiB download batches in flight on each of two devices.
  std::shared_ptr<BlockCache> staging_ = std::make_shared<BlockCache>(size_t{64} << 20, FreeStagingBlock);
};

}  // namespace

std::unique_ptr<Backend> CreateCpuBackend(int num_threads, int num_devices) {
  return std::make_unique<CpuBackend>(num_threads, num_devices);
}

}  // namespace kernelserve
