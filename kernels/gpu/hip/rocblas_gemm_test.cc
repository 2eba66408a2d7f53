// The rocBLAS GEMM ceiling. No AMD GPU and no rocBLAS exist on these
// machines: the loader's answers are tested on the real dynamic loader, and
// the measurement against stand-ins for the HIP runtime and rocBLAS (tables
// of test functions in their shapes). What that proves is this code's part:
// the GEMM asked of rocBLAS, the operands it is given, the timing, the rate
// and every resource released on every path; not rocBLAS's speed.
#include "kernels/gpu/hip/rocblas_gemm.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kernelserve {
namespace gpu {
namespace hip {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(LoadRocblas, NamesEachLibraryTriedAndWhy) {
  auto b = LoadRocblas({"librocblas-absent.so.9", "libm.so.6"});
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kUnavailable);
  const std::string m(b.status().message());
  EXPECT_THAT(m, StartsWith("cannot load rocBLAS for the GEMM ceiling (install ROCm's rocBLAS or put its lib "
                            "directory on LD_LIBRARY_PATH; or pass --bench_gemm_tflops measured elsewhere): tried "
                            "librocblas-absent.so.9 ("));
  // A library that loads but is not rocBLAS.
  EXPECT_THAT(m, HasSubstr("; libm.so.6 (loaded, but has no rocblas_create_handle)"));
  EXPECT_THAT(std::string(LoadRocblas({}).status().message()), HasSubstr("tried no library"));
}

TEST(LoadRocblas, TheSharedOneIsTheDefaultNamesFirstAnswer) {
  EXPECT_EQ(DefaultRocblasNames(),
            (std::vector<std::string>{"librocblas.so", "librocblas.so.5", "librocblas.so.4", "librocblas.so.0"}));
  const absl::StatusOr<Rocblas>& b = SharedRocblas();
  EXPECT_EQ(&b, &SharedRocblas());
  if (b.ok()) {
    EXPECT_FALSE(b->library.empty());
  } else {
    EXPECT_THAT(std::string(b.status().message()), HasSubstr("tried librocblas.so ("));
  }
}

// What the stand-ins saw.
struct Record {
  int mallocs = 0, frees = 0, events = 0, events_destroyed = 0, handles = 0, handles_destroyed = 0;
  int gemms = 0, fail_gemm_at = -1, fail_malloc_at = -1;
  size_t copied = 0;
  bool zero_copied = false;
  Stream blas_stream = nullptr;
  std::vector<float> elapsed_ms;  // one per timed call, in order
  size_t timed = 0;
  // The last GEMM's arguments.
  int trans_a = 0, trans_b = 0, m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0, ldd = 0;
  int a_type = 0, b_type = 0, c_type = 0, d_type = 0, compute = 0, algo = 0;
  float alpha = -1, beta = -1;
  bool c_is_d = false;
  const void* a = nullptr;
  const void* b = nullptr;
};
Record g;

const Stream kStream = reinterpret_cast<Stream>(0x51);

Runtime StandInRuntime() {
  Runtime r;
  r.library = "stand-in";
  r.Malloc = [](void** p, size_t bytes) {
    if (g.mallocs == g.fail_malloc_at) return kErrorOutOfMemory;
    ++g.mallocs;
    *p = std::malloc(bytes);
    return kSuccess;
  };
  r.Free = [](void* p) {
    ++g.frees;
    std::free(p);
    return kSuccess;
  };
  r.MemcpyAsync = [](void* dst, const void* src, size_t bytes, int kind, Stream s) {
    if (kind != kHostToDevice || s != kStream) return 1;
    std::memcpy(dst, src, bytes);
    const auto* v = static_cast<const uint16_t*>(src);
    for (size_t i = 0; i < bytes / 2; ++i) g.zero_copied |= (v[i] & 0x7FFF) == 0;
    g.copied += bytes;
    return kSuccess;
  };
  r.StreamSynchronize = [](Stream) { return kSuccess; };
  r.EventCreate = [](Event* e) {
    *e = reinterpret_cast<Event>(static_cast<uintptr_t>(0x100 + ++g.events));
    return kSuccess;
  };
  r.EventDestroy = [](Event) {
    ++g.events_destroyed;
    return kSuccess;
  };
  r.EventRecord = [](Event, Stream s) { return s == kStream ? kSuccess : 1; };
  r.EventSynchronize = [](Event) { return kSuccess; };
  r.EventElapsedTime = [](float* ms, Event, Event) {
    *ms = g.elapsed_ms[g.timed++ % g.elapsed_ms.size()];
    return kSuccess;
  };
  r.GetErrorName = [](Error e) { return e == kErrorOutOfMemory ? "hipErrorOutOfMemory" : "hipErrorOther"; };
  r.GetErrorString = [](Error) { return "stand-in"; };
  return r;
}

Rocblas StandInRocblas() {
  Rocblas b;
  b.library = "librocblas-stand-in.so";
  b.CreateHandle = [](Rocblas::Handle* h) {
    ++g.handles;
    *h = reinterpret_cast<Rocblas::Handle>(0x77);
    return 0;
  };
  b.DestroyHandle = [](Rocblas::Handle) {
    ++g.handles_destroyed;
    return 0;
  };
  b.SetStream = [](Rocblas::Handle, Stream s) {
    g.blas_stream = s;
    return 0;
  };
  b.GemmEx = [](Rocblas::Handle, int ta, int tb, int m, int n, int k, const void* alpha, const void* a, int at, int lda,
                const void* bm, int bt, int ldb, const void* beta, const void* c, int ct, int ldc, void* d, int dt,
                int ldd, int compute, int algo, int32_t, uint32_t) {
    if (g.gemms++ == g.fail_gemm_at) return 4;  // rocblas_status_invalid_size
    g.trans_a = ta, g.trans_b = tb, g.m = m, g.n = n, g.k = k, g.lda = lda, g.ldb = ldb, g.ldc = ldc, g.ldd = ldd;
    g.a_type = at, g.b_type = bt, g.c_type = ct, g.d_type = dt, g.compute = compute, g.algo = algo;
    g.alpha = *static_cast<const float*>(alpha);
    g.beta = *static_cast<const float*>(beta);
    g.c_is_d = c == d;
    g.a = a;
    g.b = bm;
    return 0;
  };
  b.StatusToString = [](int s) { return s == 4 ? "rocblas_status_invalid_size" : "rocblas_status_other"; };
  return b;
}

class RocblasGemm : public ::testing::Test {
 protected:
  void SetUp() override {
    g = Record{};
    g.elapsed_ms = {3.f, 2.f, 5.f, 4.f};
  }
  // Every buffer, event and handle the measurement took, given back.
  void ExpectReleased() {
    EXPECT_EQ(g.frees, g.mallocs);
    EXPECT_EQ(g.events_destroyed, g.events);
    EXPECT_EQ(g.handles_destroyed, g.handles);
  }
  const Runtime rt_ = StandInRuntime();
  const Rocblas blas_ = StandInRocblas();
};

TEST_F(RocblasGemm, TimesTheBf16GemmWithFp32AccumulationAndTakesTheBest) {
  constexpr int n = 64;
  auto r = MeasureRocblasBf16Gemm(rt_, blas_, kStream, {}, n, 4);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(r->tflops, 2.0 * n * n * n / 2e-3 / 1e12);  // the best of 3, 2, 5 and 4 ms
  EXPECT_EQ(r->desc, "rocBLAS bf16 GEMM 64^3 (fp32 accumulation, random operands, librocblas-stand-in.so loaded at "
                     "run time), best of 4");
  EXPECT_EQ(g.gemms, 3 + 4);  // warm-up, then one per timed call
  EXPECT_EQ(g.timed, 4u);
  EXPECT_EQ(g.blas_stream, kStream);
  EXPECT_EQ(g.trans_a, kRocblasOpTranspose);
  EXPECT_EQ(g.trans_b, kRocblasOpNone);
  EXPECT_EQ(g.m, n);
  EXPECT_EQ(g.n, n);
  EXPECT_EQ(g.k, n);
  for (int ld : {g.lda, g.ldb, g.ldc, g.ldd}) EXPECT_EQ(ld, n);
  for (int t : {g.a_type, g.b_type, g.c_type, g.d_type}) EXPECT_EQ(t, kRocblasBf16);
  EXPECT_EQ(g.compute, kRocblasF32);
  EXPECT_EQ(g.algo, kRocblasAlgoStandard);
  EXPECT_EQ(g.alpha, 1.f);
  EXPECT_EQ(g.beta, 0.f);
  EXPECT_TRUE(g.c_is_d);
  EXPECT_NE(g.a, g.b);
  // A and B written whole, with values that are never zero.
  EXPECT_EQ(g.copied, 2u * n * n * 2);
  EXPECT_FALSE(g.zero_copied);
  EXPECT_EQ(g.mallocs, 3);
  ExpectReleased();
}

TEST_F(RocblasGemm, ARocblasFailureIsInternalWithItsStatusAndReleasesAll) {
  g.fail_gemm_at = 1;
  auto r = MeasureRocblasBf16Gemm(rt_, blas_, kStream, {}, 32, 2);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(r.status().message(), "rocblas_gemm_ex: rocblas_status_invalid_size (status 4)");
  ExpectReleased();
  EXPECT_EQ(g.handles, 1);

  // Without rocblas_status_to_string, the number.
  g = Record{};
  g.fail_gemm_at = 0;
  Rocblas plain = blas_;
  plain.StatusToString = nullptr;
  r = MeasureRocblasBf16Gemm(rt_, plain, kStream, {}, 32, 2);
  EXPECT_EQ(r.status().message(), "rocblas_gemm_ex: rocblas_status 4");
  ExpectReleased();
}

TEST_F(RocblasGemm, OutOfDeviceMemoryIsResourceExhaustedAndFreesWhatWasTaken) {
  g.fail_malloc_at = 2;
  auto r = MeasureRocblasBf16Gemm(rt_, blas_, kStream, {}, 32, 2);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(r.status().message()), StartsWith("hipMalloc (GEMM ceiling): hipErrorOutOfMemory"));
  EXPECT_EQ(g.mallocs, 2);
  EXPECT_EQ(g.handles, 0);  // rocBLAS never reached
  ExpectReleased();
}

TEST_F(RocblasGemm, CancelledBetweenTimedCalls) {
  int polls = 0;
  auto r = MeasureRocblasBf16Gemm(rt_, blas_, kStream, [&] { return ++polls == 2; }, 32, 5);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(r.status().message(), "measuring the GEMM ceiling: cancelled");
  EXPECT_EQ(g.timed, 1u);
  ExpectReleased();
}

TEST_F(RocblasGemm, ZeroTimeOrBadSizesAreErrorsNotRates) {
  g.elapsed_ms = {0.f};
  auto r = MeasureRocblasBf16Gemm(rt_, blas_, kStream, {}, 32, 3);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(r.status().message(), "GEMM ceiling: the events timed 0 ms for a GEMM");
  ExpectReleased();
  r = MeasureRocblasBf16Gemm(rt_, blas_, kStream, {}, 0, 3);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "GEMM ceiling: n and reps must be > 0, got 0 and 3");
}

}  // namespace
}  // namespace hip
}  // namespace gpu
}  // namespace kernelserve
