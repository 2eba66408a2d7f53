#include "kernels/gpu/hip/rocblas_gemm.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace kernelserve {
namespace gpu {
namespace hip {
namespace {

template <class Fn>
void Bind(void* lib, const char* symbol, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(lib, symbol));
}

// The device memory, events and handle of one measurement, released on
// every path (the handle before the stream's buffers it may still name).
struct Scratch {
  const Runtime& rt;
  const Rocblas& blas;
  void* buf[3] = {nullptr, nullptr, nullptr};  // A, B, C (= D)
  Event start = nullptr, stop = nullptr;
  Rocblas::Handle handle = nullptr;
  ~Scratch() {
    if (handle != nullptr) (void)blas.DestroyHandle(handle);
    for (void* p : buf) {
      if (p != nullptr) (void)rt.Free(p);
    }
    if (start != nullptr) (void)rt.EventDestroy(start);
    if (stop != nullptr) (void)rt.EventDestroy(stop);
  }
};

absl::Status BlasCheck(const Rocblas& blas, int status, const char* what) {
  if (status == 0) return absl::OkStatus();
  return absl::InternalError(blas.Describe(what, status));
}

}  // namespace

std::string Rocblas::Describe(const char* what, int status) const {
  const char* text = StatusToString != nullptr ? StatusToString(status) : nullptr;
  return text != nullptr ? absl::StrCat(what, ": ", text, " (status ", status, ")")
                         : absl::StrCat(what, ": rocblas_status ", status);
}

std::vector<std::string> DefaultRocblasNames() {
  return {"librocblas.so", "librocblas.so.5", "librocblas.so.4", "librocblas.so.0"};
}

absl::StatusOr<Rocblas> LoadRocblas(const std::vector<std::string>& names) {
  std::vector<std::string> tried;
  for (const std::string& name : names) {
    void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* err = dlerror();
      tried.push_back(absl::StrCat(name, " (", err != nullptr ? err : "not loadable", ")"));
      continue;
    }
    Rocblas b;
    b.library = name;
    Bind(lib, "rocblas_create_handle", b.CreateHandle);
    Bind(lib, "rocblas_destroy_handle", b.DestroyHandle);
    Bind(lib, "rocblas_set_stream", b.SetStream);
    Bind(lib, "rocblas_gemm_ex", b.GemmEx);
    Bind(lib, "rocblas_status_to_string", b.StatusToString);
    const char* missing = !b.CreateHandle    ? "rocblas_create_handle"
                          : !b.DestroyHandle ? "rocblas_destroy_handle"
                          : !b.SetStream     ? "rocblas_set_stream"
                          : !b.GemmEx        ? "rocblas_gemm_ex"
                                             : nullptr;
    if (missing == nullptr) return b;  // the handle stays open for the process
    tried.push_back(absl::StrCat(name, " (loaded, but has no ", missing, ")"));
    dlclose(lib);
  }
  return absl::UnavailableError(
      absl::StrCat("cannot load rocBLAS for the GEMM ceiling (install ROCm's rocBLAS or put its lib directory on "
                   "LD_LIBRARY_PATH; or pass --bench_gemm_tflops measured elsewhere): tried ",
                   names.empty() ? std::string("no library") : absl::StrJoin(tried, "; ")));
}

const absl::StatusOr<Rocblas>& SharedRocblas() {
  static const auto* blas = new absl::StatusOr<Rocblas>(LoadRocblas(DefaultRocblasNames()));
  return *blas;
}

absl::StatusOr<GemmRate> MeasureRocblasBf16Gemm(const Runtime& rt, const Rocblas& blas, Stream stream,
                                                const std::function<bool()>& cancelled, int n, int reps) {
  if (n <= 0 || reps <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("GEMM ceiling: n and reps must be > 0, got ", n, " and ", reps));
  }
  const size_t bytes = static_cast<size_t>(n) * n * 2;
  Scratch s{rt, blas};
  for (void*& p : s.buf) KS_RETURN_IF_ERROR(rt.Check(rt.Malloc(&p, bytes), "hipMalloc (GEMM ceiling)"));

  // bf16 of magnitude in [0.5, 2) and either sign, copied over A and B in
  // pieces of one host block (waited for before the block is reused).
  std::vector<uint16_t> host(std::min<size_t>(bytes / 2, size_t{1} << 22));
  std::mt19937 rng(12345);
  for (uint16_t& v : host) v = static_cast<uint16_t>(0x3F00u | (rng() & 0x80FFu));
  for (int m = 0; m < 2; ++m) {
    for (size_t off = 0; off < bytes; off += host.size() * 2) {
      const size_t piece = std::min(host.size() * 2, bytes - off);
      KS_RETURN_IF_ERROR(rt.Check(
          rt.MemcpyAsync(static_cast<uint8_t*>(s.buf[m]) + off, host.data(), piece, kHostToDevice, stream),
          "hipMemcpyAsync (GEMM ceiling)"));
      KS_RETURN_IF_ERROR(rt.Check(rt.StreamSynchronize(stream), "hipStreamSynchronize (GEMM ceiling)"));
    }
  }

  KS_RETURN_IF_ERROR(BlasCheck(blas, blas.CreateHandle(&s.handle), "rocblas_create_handle"));
  KS_RETURN_IF_ERROR(BlasCheck(blas, blas.SetStream(s.handle, stream), "rocblas_set_stream"));
  const float alpha = 1.f, beta = 0.f;
  auto gemm = [&]() {
    return BlasCheck(blas,
                     blas.GemmEx(s.handle, kRocblasOpTranspose, kRocblasOpNone, n, n, n, &alpha, s.buf[0], kRocblasBf16,
                                 n, s.buf[1], kRocblasBf16, n, &beta, s.buf[2], kRocblasBf16, n, s.buf[2],
                                 kRocblasBf16, n, kRocblasF32, kRocblasAlgoStandard, 0, 0),
                     "rocblas_gemm_ex");
  };
  for (int i = 0; i < 3; ++i) KS_RETURN_IF_ERROR(gemm());
  KS_RETURN_IF_ERROR(rt.Check(rt.EventCreate(&s.start), "hipEventCreate"));
  KS_RETURN_IF_ERROR(rt.Check(rt.EventCreate(&s.stop), "hipEventCreate"));
  float best_ms = 0;
  for (int r = 0; r < reps; ++r) {
    if (cancelled && cancelled()) return absl::CancelledError("measuring the GEMM ceiling: cancelled");
    KS_RETURN_IF_ERROR(rt.Check(rt.EventRecord(s.start, stream), "hipEventRecord"));
    KS_RETURN_IF_ERROR(gemm());
    KS_RETURN_IF_ERROR(rt.Check(rt.EventRecord(s.stop, stream), "hipEventRecord"));
    KS_RETURN_IF_ERROR(rt.Check(rt.EventSynchronize(s.stop), "hipEventSynchronize"));
    float ms = 0;
    KS_RETURN_IF_ERROR(rt.Check(rt.EventElapsedTime(&ms, s.start, s.stop), "hipEventElapsedTime"));
    if (r == 0 || ms < best_ms) best_ms = ms;
  }
  if (!(best_ms > 0)) {
    return absl::InternalError(absl::StrCat("GEMM ceiling: the events timed ", best_ms, " ms for a GEMM"));
  }
  GemmRate rate;
  rate.tflops = 2.0 * n * n * static_cast<double>(n) / (best_ms * 1e-3) / 1e12;
  rate.desc = absl::StrCat("rocBLAS bf16 GEMM ", n, "^3 (fp32 accumulation, random operands, ", blas.library,
                           " loaded at run time), best of ", reps);
  return rate;
}

}  // namespace hip
}  // namespace gpu
}  // namespace kernelserve
