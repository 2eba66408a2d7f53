// The cpu worker's memory: every input is a private copy mapped read-only (a
// write faults); the output ends at a PROT_NONE guard page, with another
// before it and canary bytes in between, so a write past either end faults
// or is found after the launch. The SIGSEGV handler names what was touched
// and reports it as a kError frame before the worker dies of the signal.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/user_kernels/worker_memory.h"
#include "server/user_kernels/worker_protocol.h"

namespace kernelserve {
namespace user_kernels {
namespace {

constexpr uint8_t kCanary = 0xA5;

// ------------------------------------------------- regions, for the handler

enum class RegionKind { kInput, kGuardBefore, kGuardAfter };
struct Region {
  uintptr_t lo = 0, hi = 0;  // [lo, hi)
  RegionKind kind = RegionKind::kInput;
  char name[48] = {0};
};
Region g_regions[32];
int g_num_regions = 0;
uintptr_t g_out_lo = 0, g_out_hi = 0;

void AddRegion(const void* lo, size_t len, RegionKind kind, const std::string& name) {
  if (g_num_regions >= 32) return;
  Region& r = g_regions[g_num_regions];
  r.lo = reinterpret_cast<uintptr_t>(lo);
  r.hi = r.lo + len;
  r.kind = kind;
  strncpy(r.name, name.c_str(), sizeof(r.name) - 1);
  ++g_num_regions;
}

// Async-signal-safe text building.
struct SafeText {
  char buf[512];
  size_t n = 0;
  void Add(const char* s) {
    while (*s != 0 && n + 1 < sizeof(buf)) buf[n++] = *s++;
  }
  void AddNum(uint64_t v, int base) {
    char tmp[32];
    int k = 0;
    do {
      tmp[k++] = "0123456789abcdef"[v % static_cast<uint64_t>(base)];
      v /= static_cast<uint64_t>(base);
    } while (v != 0 && k < 31);
    if (base == 16) Add("0x");
    while (k > 0 && n + 1 < sizeof(buf)) buf[n++] = tmp[--k];
  }
};

void OnFault(int sig, siginfo_t* info, void*) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(info->si_addr);
  SafeText t;
  bool named = false;
  for (int i = 0; i < g_num_regions && !named; ++i) {
    const Region& r = g_regions[i];
    if (a < r.lo || a >= r.hi) continue;
    named = true;
    if (r.kind == RegionKind::kInput) {
      t.Add("the kernel wrote into its input ");
      t.Add(r.name);
      t.Add(" (inputs are read-only), at byte ");
      t.AddNum(a - r.lo, 10);
    } else if (r.kind == RegionKind::kGuardAfter) {
      t.Add("the kernel wrote outside its output: byte ");
      t.AddNum(a - g_out_hi, 10);
      t.Add(" past its end (a guard page)");
    } else {
      t.Add("the kernel wrote outside its output: ");
      t.AddNum(g_out_lo - a, 10);
      t.Add(" bytes before its start (a guard page)");
    }
  }
  if (!named) {
    t.Add("the kernel faulted at address ");
    t.AddNum(a, 16);
    t.Add(a < 4096 ? " (a null pointer)" : " (outside every buffer of the job)");
  }
  // A kError frame, written by hand: [tag][len][code][message].
  char frame[600];
  const uint32_t tag = kError;
  const uint64_t len = 4 + t.n;
  const int32_t code = static_cast<int32_t>(absl::StatusCode::kAborted);
  memcpy(frame, &tag, 4);
  memcpy(frame + 4, &len, 8);
  memcpy(frame + 12, &code, 4);
  memcpy(frame + 16, t.buf, t.n);
  ssize_t w = write(kWorkerProtocolFd, frame, 16 + t.n);
  (void)w;
  signal(sig, SIG_DFL);
  raise(sig);
}

void InstallFaultHandler() {
  static std::vector<char> alt(1 << 16);
  stack_t ss = {};
  ss.ss_sp = alt.data();
  ss.ss_size = alt.size();
  sigaltstack(&ss, nullptr);
  struct sigaction sa = {};
  sa.sa_sigaction = OnFault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigaction(SIGSEGV, &sa, nullptr);
  sigaction(SIGBUS, &sa, nullptr);
}

// ------------------------------------------------------------ memory

size_t PageSize() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }
size_t RoundUp(size_t n) { return (n + PageSize() - 1) / PageSize() * PageSize(); }

// A read-only private copy of `bytes`.
absl::StatusOr<const void*> ReadOnlyCopy(const std::string& name, const void* bytes, size_t n) {
  const size_t len = RoundUp(std::max<size_t>(n, 1));
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return absl::ResourceExhaustedError(absl::StrCat("mmap of input ", name, " (", n, " bytes)"));
  memcpy(p, bytes, n);
  mprotect(p, len, PROT_READ);
  AddRegion(p, len, RegionKind::kInput, name);
  return static_cast<const void*>(p);
}

struct Guarded {
  uint8_t* data = nullptr;
  size_t bytes = 0;
  uint8_t* slack = nullptr;  // canary bytes between the first guard page and data
  size_t slack_bytes = 0;
};

absl::StatusOr<Guarded> GuardedOutput(size_t bytes) {
  const size_t page = PageSize(), body = RoundUp(std::max<size_t>(bytes, 1));
  uint8_t* base = static_cast<uint8_t*>(
      mmap(nullptr, body + 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (base == MAP_FAILED) return absl::ResourceExhaustedError(absl::StrCat("mmap of the output (", bytes, " bytes)"));
  mprotect(base, page, PROT_NONE);
  mprotect(base + page + body, page, PROT_NONE);
  Guarded o;
  o.bytes = bytes;
  o.data = base + page + body - bytes;
  o.slack = base + page;
  o.slack_bytes = body - bytes;
  g_out_lo = reinterpret_cast<uintptr_t>(o.data);
  g_out_hi = g_out_lo + bytes;
  AddRegion(base, page, RegionKind::kGuardBefore, "guard");
  AddRegion(base + page + body, page, RegionKind::kGuardAfter, "guard");
  return o;
}

absl::Status CheckCanaries(const Guarded& o) {
  for (size_t i = 0; i < o.slack_bytes; ++i) {
    if (o.slack[i] != kCanary) {
      return absl::AbortedError(absl::StrCat("the kernel wrote outside its output: ", o.slack_bytes - i,
                                             " bytes before its start (canary bytes changed)"));
    }
  }
  return absl::OkStatus();
}


double NowMs() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

class HostMemory : public WorkerMemory {
 public:
  HostMemory() { InstallFaultHandler(); }
  absl::StatusOr<const void*> Input(const std::string& name, const void* bytes, size_t n) override {
    return ReadOnlyCopy(name, bytes, n);
  }
  absl::StatusOr<void*> Output(size_t bytes) override {
    absl::StatusOr<Guarded> o = GuardedOutput(bytes);
    if (!o.ok()) return o.status();
    out_ = *o;
    memset(out_.slack, kCanary, out_.slack_bytes);
    return static_cast<void*>(out_.data);
  }
  absl::StatusOr<void*> Scratch(size_t bytes) override {
    void* p = mmap(nullptr, RoundUp(std::max<size_t>(bytes, 1)), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (p == MAP_FAILED) return absl::ResourceExhaustedError(absl::StrCat("mmap of the workspace (", bytes, " bytes)"));
    return p;
  }
  absl::Status Poison() override {
    memset(out_.data, 0xFF, out_.bytes);
    return absl::OkStatus();
  }
  absl::Status Check() override { return CheckCanaries(out_); }
  absl::StatusOr<std::string> ReadOutput() override {
    return std::string(reinterpret_cast<const char*>(out_.data), out_.bytes);
  }
  void* stream() override { return nullptr; }
  absl::StatusOr<double> Time(const std::function<int()>& launch, int n) override {
    const double t0 = NowMs();
    for (int i = 0; i < n; ++i) {
      const int rc = launch();
      if (rc != 0) return absl::AbortedError(absl::StrCat("the kernel returned ", rc, " (0 is success)"));
    }
    const double ms = NowMs() - t0;
    if (absl::Status st = Check(); !st.ok()) return st;
    return ms;
  }
  absl::Status FlushCache(size_t bytes) override {
    if (bytes == 0) return absl::OkStatus();
    if (flush_bytes_ != bytes) {
      // Written once, so that the copy reads real pages (untouched anonymous
      // memory is one shared zero page, which the cache keeps).
      for (void* p : {flush_src_, flush_dst_}) {
        if (p != nullptr) munmap(p, flush_bytes_);
      }
      flush_src_ = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      flush_dst_ = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (flush_src_ == MAP_FAILED || flush_dst_ == MAP_FAILED) {
        flush_src_ = flush_dst_ = nullptr;
        flush_bytes_ = 0;
        return absl::ResourceExhaustedError(absl::StrCat("mmap of the L2 flush buffers (2 x ", bytes, " bytes)"));
      }
      memset(flush_src_, 1, bytes);
      flush_bytes_ = bytes;
    }
    memcpy(flush_dst_, flush_src_, bytes);
    return absl::OkStatus();
  }
  absl::StatusOr<DeviceLaunch> LoadDeviceKernel(const DeviceKernelSpec&) override {
    return absl::InvalidArgumentError(
        "device code runs on a GPU backend only (a cubin or PTX in kernel_worker_cuda, a code object in "
        "kernel_worker_hip)");
  }
  std::string Describe() const override { return "host memory: read-only inputs, guard pages around the output"; }

 private:
  Guarded out_;
  void* flush_src_ = nullptr;
  void* flush_dst_ = nullptr;
  size_t flush_bytes_ = 0;
};

}  // namespace

std::unique_ptr<WorkerMemory> MakeWorkerMemory(int /*device*/) { return std::make_unique<HostMemory>(); }

}  // namespace user_kernels
}  // namespace kernelserve
