#include "kernels/gpu/gemm_ceiling.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/gpu/common/gpu_status.h"

namespace kernelserve {
namespace gpu {
namespace {

// The part of cuBLAS's C ABI used (cublas_api.h, CUDA 13): enums are ints,
// the handle an opaque pointer. Declared here so that nothing else of the
// toolkit's headers is needed.
using BlasHandle = void*;
using BlasStatusT = int;
constexpr BlasStatusT kBlasSuccess = 0;
constexpr int kOpN = 0, kOpT = 1;      // cublasOperation_t
constexpr int kR16Bf = 14;            // cudaDataType CUDA_R_16BF
constexpr int kCompute32F = 68;       // cublasComputeType_t CUBLAS_COMPUTE_32F
constexpr int kGemmDefault = -1;      // cublasGemmAlgo_t CUBLAS_GEMM_DEFAULT
using CreateFn = BlasStatusT (*)(BlasHandle*);
using DestroyFn = BlasStatusT (*)(BlasHandle);
using SetStreamFn = BlasStatusT (*)(BlasHandle, cudaStream_t);
using GemmExFn = BlasStatusT (*)(BlasHandle, int, int, int, int, int, const void*, const void*, int, int,
                                 const void*, int, int, const void*, void*, int, int, int, int);

// The cuBLAS entry points used, resolved from the shared library.
struct Cublas {
  void* lib = nullptr;
  std::string path;
  CreateFn create = nullptr;
  DestroyFn destroy = nullptr;
  SetStreamFn set_stream = nullptr;
  GemmExFn gemm = nullptr;
  ~Cublas() {
    if (lib != nullptr) dlclose(lib);
  }
};

absl::Status Load(Cublas* c) {
  for (const char* name : {"libcublas.so.13", "libcublas.so", "/usr/local/cuda/lib64/libcublas.so.13"}) {
    c->lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (c->lib != nullptr) {
      c->path = name;
      break;
    }
  }
  if (c->lib == nullptr) return absl::UnavailableError("libcublas.so.13 not found (dlopen)");
  c->create = reinterpret_cast<decltype(c->create)>(dlsym(c->lib, "cublasCreate_v2"));
  c->destroy = reinterpret_cast<decltype(c->destroy)>(dlsym(c->lib, "cublasDestroy_v2"));
  c->set_stream = reinterpret_cast<decltype(c->set_stream)>(dlsym(c->lib, "cublasSetStream_v2"));
  c->gemm = reinterpret_cast<decltype(c->gemm)>(dlsym(c->lib, "cublasGemmEx"));
  if (!c->create || !c->destroy || !c->set_stream || !c->gemm) {
    return absl::UnavailableError(absl::StrCat(c->path, " lacks cublasCreate_v2/cublasGemmEx"));
  }
  return absl::OkStatus();
}

absl::Status BlasStatus(BlasStatusT s, const char* what) {
  if (s == kBlasSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, " failed: cublas status ", static_cast<int>(s)));
}

// Device buffers and events freed on every path.
struct Scratch {
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  ~Scratch() {
    for (void* p : {a, b, c}) {
      if (p != nullptr) (void)cudaFree(p);
    }
    if (start != nullptr) (void)cudaEventDestroy(start);
    if (stop != nullptr) (void)cudaEventDestroy(stop);
  }
};

}  // namespace

absl::StatusOr<GemmRate> MeasureCublasBf16Gemm(cudaStream_t stream, int n, int reps) {
  Cublas blas;
  KS_RETURN_IF_ERROR(Load(&blas));
  const size_t bytes = static_cast<size_t>(n) * n * 2;
  Scratch s;
  KS_RETURN_IF_ERROR(GpuStatus(cudaMalloc(&s.a, bytes), "cudaMalloc (GEMM ceiling)"));
  KS_RETURN_IF_ERROR(GpuStatus(cudaMalloc(&s.b, bytes), "cudaMalloc (GEMM ceiling)"));
  KS_RETURN_IF_ERROR(GpuStatus(cudaMalloc(&s.c, bytes), "cudaMalloc (GEMM ceiling)"));
  // Random bf16 in about +-[0.5, 2): never zeros, which run faster than real data.
  std::vector<uint16_t> host(std::min<size_t>(bytes / 2, size_t{1} << 22));
  std::mt19937 rng(12345);
  for (uint16_t& v : host) v = static_cast<uint16_t>(0x3F00u | (rng() & 0x80FFu));
  for (void* p : {s.a, s.b}) {
    for (size_t off = 0; off < bytes; off += host.size() * 2) {
      const size_t m = std::min(host.size() * 2, bytes - off);
      KS_RETURN_IF_ERROR(GpuStatus(cudaMemcpyAsync(static_cast<uint8_t*>(p) + off, host.data(), m,
                                                   cudaMemcpyHostToDevice, stream),
                                   "cudaMemcpyAsync (GEMM ceiling)"));
    }
  }
  BlasHandle h = nullptr;
  KS_RETURN_IF_ERROR(BlasStatus(blas.create(&h), "cublasCreate"));
  GemmRate rate;
  auto run = [&]() -> absl::Status {
    KS_RETURN_IF_ERROR(BlasStatus(blas.set_stream(h, stream), "cublasSetStream"));
    const float alpha = 1.f, beta = 0.f;
    auto gemm = [&]() {
      return BlasStatus(blas.gemm(h, kOpT, kOpN, n, n, n, &alpha, s.a, kR16Bf, n, s.b, kR16Bf, n, &beta, s.c,
                                  kR16Bf, n, kCompute32F, kGemmDefault),
                        "cublasGemmEx");
    };
    for (int i = 0; i < 3; ++i) KS_RETURN_IF_ERROR(gemm());
    KS_RETURN_IF_ERROR(GpuStatus(cudaEventCreate(&s.start), "cudaEventCreate"));
    KS_RETURN_IF_ERROR(GpuStatus(cudaEventCreate(&s.stop), "cudaEventCreate"));
    float best = 1e30f;
    for (int r = 0; r < reps; ++r) {
      KS_RETURN_IF_ERROR(GpuStatus(cudaEventRecord(s.start, stream), "cudaEventRecord"));
      KS_RETURN_IF_ERROR(gemm());
      KS_RETURN_IF_ERROR(GpuStatus(cudaEventRecord(s.stop, stream), "cudaEventRecord"));
      KS_RETURN_IF_ERROR(GpuStatus(cudaEventSynchronize(s.stop), "cudaEventSynchronize"));
      float ms = 0;
      KS_RETURN_IF_ERROR(GpuStatus(cudaEventElapsedTime(&ms, s.start, s.stop), "cudaEventElapsedTime"));
      best = std::min(best, ms);
    }
    rate.tflops = 2.0 * n * n * static_cast<double>(n) / (best * 1e-3) / 1e12;
    rate.desc = absl::StrCat("cuBLAS bf16 GEMM ", n, "^3 (fp32 accumulation, random operands, ", blas.path,
                             " loaded at run time), best of ", reps);
    return rate.tflops > 0 ? absl::OkStatus() : absl::InternalError("GEMM ceiling: zero time");
  };
  const absl::Status st = run();
  (void)blas.destroy(h);  // also when run() failed
  if (!st.ok()) return st;
  return rate;
}

}  // namespace gpu
}  // namespace kernelserve
