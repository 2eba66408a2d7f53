#include "kernels/cpu/cpu_gemm.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "kernels/cpu/cpu_simd.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define KS_CPU_AVX512_DISPATCH 1
#endif

namespace kernelserve {
namespace cpu {
namespace {

constexpr int64_t kMr = 6;    // micro-tile rows (A panel width)
// Depth of a packed step: one B panel (kc x 16 or 32 floats, 24 or 32 KiB)
// stays in a 48 KiB L1 while the A block streams past it.
constexpr int64_t KcFor(int64_t nr) { return nr == 32 ? 256 : 384; }
constexpr int64_t kMc = 144;  // rows of A per work item (~216 KiB packed, L2)
constexpr int64_t kNc = 3072; // columns of B per packed step (L3)
constexpr int64_t kNb = 192;  // columns per work item (12 or 6 B panels)

// 64-byte aligned scratch that frees itself.
struct Aligned {
  explicit Aligned(size_t floats)
      : p(static_cast<float*>(std::aligned_alloc(64, std::max<size_t>(64, (floats * 4 + 63) / 64 * 64)))) {}
  ~Aligned() { std::free(p); }
  Aligned(const Aligned&) = delete;
  Aligned& operator=(const Aligned&) = delete;
  float* p;
};

// One B panel: B[0:kc, 0:nr] (row stride ldb) as [kc][nr].
void PackBPanel(const float* b, int64_t ldb, int64_t kc, int64_t nr, float* out) {
  for (int64_t p = 0; p < kc; ++p) std::copy(b + p * ldb, b + p * ldb + nr, out + p * nr);
}

// One A panel: A[0:6, 0:kc] (row stride lda) as [kc][6].
void PackAPanel(const float* a, int64_t lda, int64_t kc, float* out) {
  for (int64_t r = 0; r < kMr; ++r) {
    const float* src = a + r * lda;
    for (int64_t p = 0; p < kc; ++p) out[p * kMr + r] = src[p];
  }
}

// C[6][16] (+)= Ap[kc][6] * Bp[kc][16]; `accumulate`: add to C, else overwrite.
void MicroKernel16(int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc, bool accumulate) {
#ifdef KS_CPU_AVX2
  __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
  __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
  __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
  __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
  __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
  __m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
  for (int64_t p = 0; p < kc; ++p) {
    const __m256 b0 = _mm256_load_ps(bp);
    const __m256 b1 = _mm256_load_ps(bp + 8);
    __m256 a = _mm256_broadcast_ss(ap);
    c00 = _mm256_fmadd_ps(a, b0, c00);
    c01 = _mm256_fmadd_ps(a, b1, c01);
    a = _mm256_broadcast_ss(ap + 1);
    c10 = _mm256_fmadd_ps(a, b0, c10);
    c11 = _mm256_fmadd_ps(a, b1, c11);
    a = _mm256_broadcast_ss(ap + 2);
    c20 = _mm256_fmadd_ps(a, b0, c20);
    c21 = _mm256_fmadd_ps(a, b1, c21);
    a = _mm256_broadcast_ss(ap + 3);
    c30 = _mm256_fmadd_ps(a, b0, c30);
    c31 = _mm256_fmadd_ps(a, b1, c31);
    a = _mm256_broadcast_ss(ap + 4);
    c40 = _mm256_fmadd_ps(a, b0, c40);
    c41 = _mm256_fmadd_ps(a, b1, c41);
    a = _mm256_broadcast_ss(ap + 5);
    c50 = _mm256_fmadd_ps(a, b0, c50);
    c51 = _mm256_fmadd_ps(a, b1, c51);
    ap += kMr;
    bp += 16;
  }
  const __m256 acc[kMr][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  for (int64_t r = 0; r < kMr; ++r) {
    float* cr = c + r * ldc;
    __m256 v0 = acc[r][0], v1 = acc[r][1];
    if (accumulate) {
      v0 = _mm256_add_ps(v0, _mm256_loadu_ps(cr));
      v1 = _mm256_add_ps(v1, _mm256_loadu_ps(cr + 8));
    }
    _mm256_storeu_ps(cr, v0);
    _mm256_storeu_ps(cr + 8, v1);
  }
#else
  float acc[kMr][16] = {};
  for (int64_t p = 0; p < kc; ++p) {
    for (int64_t r = 0; r < kMr; ++r) {
      for (int64_t j = 0; j < 16; ++j) acc[r][j] += ap[p * kMr + r] * bp[p * 16 + j];
    }
  }
  for (int64_t r = 0; r < kMr; ++r) {
    for (int64_t j = 0; j < 16; ++j) c[r * ldc + j] = accumulate ? c[r * ldc + j] + acc[r][j] : acc[r][j];
  }
#endif
}

#ifdef KS_CPU_AVX512_DISPATCH
// C[6][32] (+)= Ap[kc][6] * Bp[kc][32], for CPUs with AVX-512 (checked at run time).
__attribute__((target("avx512f"))) void MicroKernel32(int64_t kc, const float* ap, const float* bp, float* c,
                                                      int64_t ldc, bool accumulate) {
  __m512 c00 = _mm512_setzero_ps(), c01 = _mm512_setzero_ps();
  __m512 c10 = _mm512_setzero_ps(), c11 = _mm512_setzero_ps();
  __m512 c20 = _mm512_setzero_ps(), c21 = _mm512_setzero_ps();
  __m512 c30 = _mm512_setzero_ps(), c31 = _mm512_setzero_ps();
  __m512 c40 = _mm512_setzero_ps(), c41 = _mm512_setzero_ps();
  __m512 c50 = _mm512_setzero_ps(), c51 = _mm512_setzero_ps();
  for (int64_t p = 0; p < kc; ++p) {
    const __m512 b0 = _mm512_load_ps(bp);
    const __m512 b1 = _mm512_load_ps(bp + 16);
    __m512 a = _mm512_set1_ps(ap[0]);
    c00 = _mm512_fmadd_ps(a, b0, c00);
    c01 = _mm512_fmadd_ps(a, b1, c01);
    a = _mm512_set1_ps(ap[1]);
    c10 = _mm512_fmadd_ps(a, b0, c10);
    c11 = _mm512_fmadd_ps(a, b1, c11);
    a = _mm512_set1_ps(ap[2]);
    c20 = _mm512_fmadd_ps(a, b0, c20);
    c21 = _mm512_fmadd_ps(a, b1, c21);
    a = _mm512_set1_ps(ap[3]);
    c30 = _mm512_fmadd_ps(a, b0, c30);
    c31 = _mm512_fmadd_ps(a, b1, c31);
    a = _mm512_set1_ps(ap[4]);
    c40 = _mm512_fmadd_ps(a, b0, c40);
    c41 = _mm512_fmadd_ps(a, b1, c41);
    a = _mm512_set1_ps(ap[5]);
    c50 = _mm512_fmadd_ps(a, b0, c50);
    c51 = _mm512_fmadd_ps(a, b1, c51);
    ap += kMr;
    bp += 32;
  }
  const __m512 acc[kMr][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  for (int64_t r = 0; r < kMr; ++r) {
    float* cr = c + r * ldc;
    __m512 v0 = acc[r][0], v1 = acc[r][1];
    if (accumulate) {
      v0 = _mm512_add_ps(v0, _mm512_loadu_ps(cr));
      v1 = _mm512_add_ps(v1, _mm512_loadu_ps(cr + 16));
    }
    _mm512_storeu_ps(cr, v0);
    _mm512_storeu_ps(cr + 16, v1);
  }
}
#endif

double NowS() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

const char* GemmIsaName(GemmIsa isa) { return isa == GemmIsa::kAvx512 ? "AVX-512" : "AVX2/FMA"; }

bool GemmIsaAvailable(GemmIsa isa) {
  if (isa == GemmIsa::kAvx2) return true;  // scalar fallback where compiled without AVX2
#ifdef KS_CPU_AVX512_DISPATCH
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  return avx512;
#else
  return false;
#endif
}

absl::Status Sgemm(int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c, int threads,
                   GemmIsa isa) {
  if (!GemmIsaAvailable(isa)) {
    return absl::FailedPreconditionError(absl::StrCat("sgemm: this CPU has no ", GemmIsaName(isa)));
  }
  const int64_t nr = isa == GemmIsa::kAvx512 ? 32 : 16;
  if (m <= 0 || n <= 0 || k <= 0 || m % kMr != 0 || n % nr != 0) {
    return absl::InvalidArgumentError(absl::StrCat("sgemm (", GemmIsaName(isa), "): expected m a multiple of ",
                                                   kMr, ", n a multiple of ", nr, " and k >= 1; got ", m, " x ", n,
                                                   " x ", k));
  }
  threads = std::max(1, threads);
  const int64_t nc_max = std::min(kNc, n);
  const int64_t kc_step = KcFor(nr);
  const int64_t kc_max = std::min(kc_step, k);
  // Both operands of one (KC x NC) step are packed once, by all threads, and
  // shared: the work items are (MC rows x kNb columns) tiles, enough of them
  // to keep many cores busy at modest sizes.
  Aligned bpack(static_cast<size_t>(kc_max * nc_max));
  Aligned apack(static_cast<size_t>(m * kc_max));
  for (int64_t jc = 0; jc < n; jc += kNc) {
    const int64_t nc = std::min(kNc, n - jc);
    const int64_t col_items = (nc + kNb - 1) / kNb;
    for (int64_t pc = 0; pc < k; pc += kc_step) {
      const int64_t kc = std::min(kc_step, k - pc);
      const bool accumulate = pc > 0;
#pragma omp parallel num_threads(threads)
      {
#pragma omp for schedule(static) nowait
        for (int64_t jp = 0; jp < nc; jp += nr) PackBPanel(b + pc * n + jc + jp, n, kc, nr, bpack.p + jp * kc);
#pragma omp for schedule(static)
        for (int64_t ip = 0; ip < m; ip += kMr) PackAPanel(a + ip * k + pc, k, kc, apack.p + ip * kc);
        // Per item: a B panel (L1) outer, the item's A block (L2) streamed inner.
#pragma omp for collapse(2) schedule(dynamic, 1)
        for (int64_t ic = 0; ic < m; ic += kMc) {
          for (int64_t t = 0; t < col_items; ++t) {
            const int64_t i_end = std::min(m, ic + kMc);
            const int64_t j_end = std::min(nc, (t + 1) * kNb);
            for (int64_t jr = t * kNb; jr < j_end; jr += nr) {
              for (int64_t ir = ic; ir < i_end; ir += kMr) {
                const float* ap = apack.p + ir * kc;
                const float* bp = bpack.p + jr * kc;
                float* cp = c + ir * n + jc + jr;
#ifdef KS_CPU_AVX512_DISPATCH
                if (isa == GemmIsa::kAvx512) {
                  MicroKernel32(kc, ap, bp, cp, n, accumulate);
                  continue;
                }
#endif
                MicroKernel16(kc, ap, bp, cp, n, accumulate);
              }
            }
          }
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<GemmRate> MeasureSgemm(int64_t n, int reps, int threads, const std::function<bool()>& cancelled) {
  if (n <= 0 || n % 96 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("gemm ceiling: n must be a multiple of 96, got ", n));
  }
  reps = std::max(1, reps);
  const size_t elems = static_cast<size_t>(n * n);
  std::vector<float> a(elems), b(elems), c(elems);
  // Small exact values: the ceiling times arithmetic, not denormals.
  for (size_t i = 0; i < elems; ++i) {
    a[i] = static_cast<float>((i * 7) % 13) * 0.125f - 0.75f;
    b[i] = static_cast<float>((i * 5) % 11) * 0.125f - 0.625f;
  }
  const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  std::vector<std::pair<std::string, double>> rates;  // micro-kernel, TFLOP/s
  for (GemmIsa isa : {GemmIsa::kAvx2, GemmIsa::kAvx512}) {
    if (!GemmIsaAvailable(isa)) continue;
    // Between runs (~0.01-0.3 s each), so that a cancelled job is not held up.
    auto stop = [&]() -> absl::Status {
      return cancelled && cancelled() ? absl::CancelledError("gemm ceiling: cancelled") : absl::OkStatus();
    };
    absl::Status st = stop();
    if (st.ok()) st = Sgemm(n, n, n, a.data(), b.data(), c.data(), threads, isa);  // warm-up
    if (!st.ok()) return st;
    double secs = 1e30;
    for (int r = 0; r < reps; ++r) {
      st = stop();
      if (!st.ok()) return st;
      const double t0 = NowS();
      st = Sgemm(n, n, n, a.data(), b.data(), c.data(), threads, isa);
      if (!st.ok()) return st;
      secs = std::min(secs, NowS() - t0);
    }
#ifdef KS_CPU_AVX2
    const char* kernel = isa == GemmIsa::kAvx512 ? "6x32 AVX-512" : "6x16 AVX2/FMA";
#else
    const char* kernel = isa == GemmIsa::kAvx512 ? "6x32 AVX-512" : "6x16 scalar";
#endif
    rates.emplace_back(kernel, flops / secs / 1e12);
  }
  // The fastest micro-kernel is the ceiling; the other's rate stays in the description.
  size_t best = 0;
  for (size_t i = 1; i < rates.size(); ++i) {
    if (rates[i].second > rates[best].second) best = i;
  }
  std::vector<std::string> others;
  for (size_t i = 0; i < rates.size(); ++i) {
    if (i != best) others.push_back(absl::StrFormat("%s %.3g GFLOP/s", rates[i].first, rates[i].second * 1e3));
  }
  GemmRate rate;
  rate.tflops = rates[best].second;
  rate.desc = absl::StrFormat("fp32 GEMM %d^3, packed %s micro-kernel, %d-row cache blocks, %d threads, best of %d%s",
                              n, rates[best].first, kMc, threads, reps,
                              others.empty() ? "" : absl::StrCat(" (also tried: ", absl::StrJoin(others, ", "), ")"));
  return rate;
}

}  // namespace cpu
}  // namespace kernelserve
