// MXFP4 MoE on the cpu (DESIGN §4). Pairs are routed into per-expert blocks
// (moe_routing.h); each work item takes one block and a chunk of weight rows,
// dequantizes those MXFP4 rows once into fp32 and multiplies them with every
// pair of the block (fp32 accumulation). Results are per pair in fp32; the
// epilogues (SwiGLU, weighted sum over r in order) run after the GEMM, so the
// output does not depend on thread timing.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/api/ops.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_simd.h"
#include "kernels/cpu/moe_routing.h"
#include "kernels/numerics/numerics.h"

namespace kernelserve {
namespace cpu {
namespace {

constexpr int64_t kBlockSize = 32;  // pairs per routing block
constexpr int64_t kRowChunk = 16;   // weight rows dequantized per work item
constexpr int64_t kTokenChunk = 1024;

// 2x the E2M1 values, so they fit int8; the scale absorbs the 1/2.
alignas(16) constexpr int8_t kE2M1Times2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// E8M0 scale / 2 for each code (the LUT holds 2x the E2M1 values).
struct HalfScales {
  float v[256];
  HalfScales() {
    for (int e = 0; e < 256; ++e) v[e] = numerics::E8M0ToFloat(static_cast<uint8_t>(e)) * 0.5f;
  }
};
const HalfScales& HalfScaleTable() {
  static const HalfScales* t = new HalfScales();
  return *t;
}

#ifdef KS_CPU_AVX2
// The 32 elements of one MXFP4 group as 2x their value (exact small integers).
inline void DecodeGroupTimes2(const uint8_t* src, __m256 out[4]) {
  const __m128i lut = _mm_load_si128(reinterpret_cast<const __m128i*>(kE2M1Times2));
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
  const __m128i mask = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_shuffle_epi8(lut, _mm_and_si128(bytes, mask));
  const __m128i hi = _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(bytes, 4), mask));
  const __m128i e0 = _mm_unpacklo_epi8(lo, hi);  // elements 0..15
  const __m128i e1 = _mm_unpackhi_epi8(lo, hi);  // elements 16..31
  out[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(e0));
  out[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(e0, 8)));
  out[2] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(e1));
  out[3] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(e1, 8)));
}

// For blocks of few pairs the weights are used once or twice: decode each
// group in registers and fold its scale into the group's partial dot product
// instead of writing fp32 rows. out[i][n0 + r] for MP pairs, NR rows.
template <int MP, int NR>
void FusedDot(const float* const* a, const uint8_t* w, const uint8_t* s, int64_t k, int64_t row_bytes,
              int64_t row_scales, float* const* out, int64_t n0) {
  const float* half = HalfScaleTable().v;
  __m256 acc[MP][NR];
  for (int i = 0; i < MP; ++i)
    for (int r = 0; r < NR; ++r) acc[i][r] = _mm256_setzero_ps();
  for (int64_t g = 0; g < k / 32; ++g) {
    __m256 wv[NR][4];
    __m256 sv[NR];
    for (int r = 0; r < NR; ++r) {
      DecodeGroupTimes2(w + r * row_bytes + g * 16, wv[r]);
      sv[r] = _mm256_set1_ps(half[s[r * row_scales + g]]);
    }
    for (int i = 0; i < MP; ++i) {
      const float* ai = a[i] + g * 32;
      const __m256 a0 = _mm256_loadu_ps(ai), a1 = _mm256_loadu_ps(ai + 8);
      const __m256 a2 = _mm256_loadu_ps(ai + 16), a3 = _mm256_loadu_ps(ai + 24);
      for (int r = 0; r < NR; ++r) {
        __m256 t = _mm256_mul_ps(a0, wv[r][0]);
        t = _mm256_fmadd_ps(a1, wv[r][1], t);
        t = _mm256_fmadd_ps(a2, wv[r][2], t);
        t = _mm256_fmadd_ps(a3, wv[r][3], t);
        acc[i][r] = _mm256_fmadd_ps(t, sv[r], acc[i][r]);
      }
    }
  }
  for (int i = 0; i < MP; ++i)
    for (int r = 0; r < NR; ++r) out[i][n0 + r] = HorizontalSum(acc[i][r]);
}

template <int MP>
void FusedRows(const float* const* a, const uint8_t* w, const uint8_t* s, int64_t k, int64_t row_bytes,
               int64_t row_scales, int64_t nrows, float* const* out, int64_t n0) {
  int64_t n = 0;
  for (; n + 2 <= nrows; n += 2) {
    FusedDot<MP, 2>(a, w + n * row_bytes, s + n * row_scales, k, row_bytes, row_scales, out, n0 + n);
  }
  for (; n < nrows; ++n) {
    FusedDot<MP, 1>(a, w + n * row_bytes, s + n * row_scales, k, row_bytes, row_scales, out, n0 + n);
  }
}
#endif  // KS_CPU_AVX2

// Dequantizes one MXFP4 row of `k` elements (k % 32 == 0).
void DequantRow(const uint8_t* packed, const uint8_t* scales, int64_t k, float* out) {
  const float* half = HalfScaleTable().v;
  for (int64_t g = 0; g < k / 32; ++g) {
    const float s = half[scales[g]];
    const uint8_t* src = packed + g * 16;
    float* dst = out + g * 32;
#ifdef KS_CPU_AVX2
    const __m128i lut = _mm_load_si128(reinterpret_cast<const __m128i*>(kE2M1Times2));
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
    const __m128i mask = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_shuffle_epi8(lut, _mm_and_si128(bytes, mask));
    const __m128i hi = _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(bytes, 4), mask));
    const __m128i e0 = _mm_unpacklo_epi8(lo, hi);  // elements 0..15
    const __m128i e1 = _mm_unpackhi_epi8(lo, hi);  // elements 16..31
    const __m256 vs = _mm256_set1_ps(s);
    _mm256_storeu_ps(dst, _mm256_mul_ps(vs, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(e0))));
    _mm256_storeu_ps(dst + 8, _mm256_mul_ps(vs, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(e0, 8)))));
    _mm256_storeu_ps(dst + 16, _mm256_mul_ps(vs, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(e1))));
    _mm256_storeu_ps(dst + 24, _mm256_mul_ps(vs, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(e1, 8)))));
#else
    for (int i = 0; i < 16; ++i) {
      dst[2 * i] = s * kE2M1Times2[src[i] & 0xF];
      dst[2 * i + 1] = s * kE2M1Times2[src[i] >> 4];
    }
#endif
  }
}

// out[i*ldo + n] = dot(a[i], w[n]) for MP activation rows and NR weight rows.
template <int MP, int NR>
void DotBlock(const float* const* a, const float* w, int64_t k, float* const* out, int64_t n0) {
#ifdef KS_CPU_AVX2
  __m256 acc[MP][NR];
  for (int i = 0; i < MP; ++i)
    for (int r = 0; r < NR; ++r) acc[i][r] = _mm256_setzero_ps();
  for (int64_t x = 0; x < k; x += 8) {
    __m256 wv[NR];
    for (int r = 0; r < NR; ++r) wv[r] = _mm256_loadu_ps(w + r * k + x);
    for (int i = 0; i < MP; ++i) {
      const __m256 av = _mm256_loadu_ps(a[i] + x);
      for (int r = 0; r < NR; ++r) acc[i][r] = _mm256_fmadd_ps(av, wv[r], acc[i][r]);
    }
  }
  for (int i = 0; i < MP; ++i)
    for (int r = 0; r < NR; ++r) out[i][n0 + r] = HorizontalSum(acc[i][r]);
#else
  for (int i = 0; i < MP; ++i) {
    for (int r = 0; r < NR; ++r) {
      float s = 0;
      for (int64_t x = 0; x < k; ++x) s += a[i][x] * w[r * k + x];
      out[i][n0 + r] = s;
    }
  }
#endif
}

template <int MP>
void DotRows(const float* const* a, const float* w, int64_t k, int64_t nrows, float* const* out,
             int64_t n0) {
  int64_t n = 0;
  for (; n + 2 <= nrows; n += 2) DotBlock<MP, 2>(a, w + n * k, k, out, n0 + n);
  for (; n < nrows; ++n) DotBlock<MP, 1>(a, w + n * k, k, out, n0 + n);
}

// out[pair][0..rows) = a[pair / a_div] . W[expert(pair)]^T over all pairs.
void GroupedGemm(const MoeRouting& rt, const float* a, int64_t a_div, int64_t in_dim,
                 const uint8_t* w, const uint8_t* scales, int64_t rows, float* out, int threads) {
  const int64_t chunks = (rows + kRowChunk - 1) / kRowChunk;
  const int64_t items = rt.num_blocks() * chunks;
  const int64_t row_bytes = in_dim / 2, row_scales = in_dim / 32;
#pragma omp parallel num_threads(threads)
  {
    std::vector<float> wbuf(kRowChunk * in_dim);
    const float* arows[kBlockSize];
    float* orows[kBlockSize];
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t blk = item / chunks, n0 = (item % chunks) * kRowChunk;
      const int64_t e = rt.block_expert[blk];
      int m = 0;
      for (int64_t i = 0; i < rt.block_size; ++i) {
        const int32_t pr = rt.sorted_pairs[blk * rt.block_size + i];
        if (pr < 0) break;  // padding comes last
        arows[m] = a + (pr / a_div) * in_dim;
        orows[m] = out + pr * rows;
        ++m;
      }
      if (m == 0) continue;
      const int64_t nrows = std::min(kRowChunk, rows - n0);
#ifdef KS_CPU_AVX2
      if (m <= 2) {
        const uint8_t* wr = w + (e * rows + n0) * row_bytes;
        const uint8_t* sr = scales + (e * rows + n0) * row_scales;
        if (m == 1) {
          FusedRows<1>(arows, wr, sr, in_dim, row_bytes, row_scales, nrows, orows, n0);
        } else {
          FusedRows<2>(arows, wr, sr, in_dim, row_bytes, row_scales, nrows, orows, n0);
        }
        continue;
      }
#endif
      for (int64_t r = 0; r < nrows; ++r) {
        const int64_t row = e * rows + n0 + r;
        DequantRow(w + row * row_bytes, scales + row * row_scales, in_dim, wbuf.data() + r * in_dim);
      }
      int i = 0;
      for (; i + 4 <= m; i += 4) DotRows<4>(arows + i, wbuf.data(), in_dim, nrows, orows + i, n0);
      switch (m - i) {
        case 3: DotRows<3>(arows + i, wbuf.data(), in_dim, nrows, orows + i, n0); break;
        case 2: DotRows<2>(arows + i, wbuf.data(), in_dim, nrows, orows + i, n0); break;
        case 1: DotRows<1>(arows + i, wbuf.data(), in_dim, nrows, orows + i, n0); break;
        default: break;
      }
    }
  }
}

std::vector<float> Bf16ToFloats(const uint16_t* src, int64_t n, int threads) {
  std::vector<float> out(n);
  const int64_t chunk = 1 << 16;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t c = 0; c < (n + chunk - 1) / chunk; ++c) {
    const int64_t lo = c * chunk, hi = std::min(n, lo + chunk);
    Bf16RowToFloat(src + lo, hi - lo, out.data() + lo);
  }
  return out;
}

void StoreBf16(const std::vector<float>& v, Rounding mode, uint16_t* out, int threads) {
  const int64_t n = static_cast<int64_t>(v.size());
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = numerics::FloatToBf16(v[i], mode);
}

// silu(gate) * up per pair: h [pairs][2I] -> [pairs][I].
std::vector<float> SwiGlu(const std::vector<float>& h, int64_t pairs, int64_t inter, int threads) {
  std::vector<float> a(pairs * inter);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t pr = 0; pr < pairs; ++pr) {
    const float* g = h.data() + pr * 2 * inter;
    const float* u = g + inter;
    for (int64_t i = 0; i < inter; ++i) a[pr * inter + i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  }
  return a;
}

// sum_r w[t, r] * y[t*top_k + r] in r order.
std::vector<float> WeightedSum(const std::vector<float>& y, const float* w, int64_t tokens,
                               int64_t top_k, int64_t n, int threads) {
  std::vector<float> o(tokens * n, 0.0f);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t t = 0; t < tokens; ++t) {
    float* ot = o.data() + t * n;
    for (int64_t r = 0; r < top_k; ++r) {
      const float wt = w[t * top_k + r];
      const float* yr = y.data() + (t * top_k + r) * n;
      for (int64_t c = 0; c < n; ++c) ot[c] += wt * yr[c];
    }
  }
  return o;
}

absl::Status CheckWeights(const char* name, const TensorView& w, const TensorView& s,
                          int64_t experts, int64_t rows, int64_t in_dim) {
  if (w.empty() || s.empty()) return absl::InvalidArgumentError(absl::StrCat("moe: ", name, " has no data"));
  if (w.desc.dtype != DType::kFp4E2M1 || w.desc.num_elements() != experts * rows * in_dim ||
      s.desc.num_elements() != experts * rows * (in_dim / 32) || in_dim % 32 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("moe: ", name, " ", w.desc.DebugString(),
                                                   " does not match the params"));
  }
  return absl::OkStatus();
}

// Tokens [t0, t1) of a validated call; x and dst point at token t0's rows.
absl::Status MoeTokens(const MoeParams& p, const MoeInputs& in, int64_t t0, int64_t t1,
                       const uint16_t* x_bf16, uint16_t* dst, int threads) {
  const bool gate_up = p.stage == MoeStage::kGateUp || p.stage == MoeStage::kLayer;
  const bool weighted = p.stage == MoeStage::kLayer || (p.stage == MoeStage::kDown && p.weighted_sum);
  const int64_t tokens = t1 - t0;
  KS_ASSIGN_OR_RETURN(const MoeRouting rt, BuildMoeRouting(in.topk_ids.as<const int32_t>() + t0 * p.top_k,
                                                           tokens, p.top_k, p.experts, kBlockSize));
  const int64_t pairs = tokens * p.top_k;
  const std::vector<float> x =
      Bf16ToFloats(x_bf16, gate_up ? tokens * p.hidden : pairs * p.inter, threads);
  std::vector<float> act;  // down-projection input [pairs][I]
  if (gate_up) {
    std::vector<float> h(pairs * 2 * p.inter);
    GroupedGemm(rt, x.data(), p.top_k, p.hidden, in.w13.as<const uint8_t>(),
                in.w13_scales.as<const uint8_t>(), 2 * p.inter, h.data(), threads);
    if (p.stage == MoeStage::kGateUp) {
      StoreBf16(p.swiglu ? SwiGlu(h, pairs, p.inter, threads) : h, p.rounding, dst, threads);
      return absl::OkStatus();
    }
    act = SwiGlu(h, pairs, p.inter, threads);
    // The layer stores its intermediate as bf16 (RTNE) between the GEMMs.
    for (float& v : act) v = Bf16Bits(numerics::FloatToBf16(v, Rounding::kRtne));
  }
  const float* a = gate_up ? act.data() : x.data();
  std::vector<float> y(pairs * p.out_dim);
  GroupedGemm(rt, a, 1, p.inter, in.w2.as<const uint8_t>(), in.w2_scales.as<const uint8_t>(), p.out_dim,
              y.data(), threads);
  if (weighted) {
    StoreBf16(WeightedSum(y, in.topk_weights.as<const float>() + t0 * p.top_k, tokens, p.top_k, p.out_dim,
                          threads),
              p.rounding, dst, threads);
  } else {
    StoreBf16(y, p.rounding, dst, threads);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Moe(const MoeParams& p, const MoeInputs& in, TensorView& out, int threads) {
  const TensorDesc want = p.OutputDesc();
  if (out.desc.dtype != DType::kBf16 || out.desc.num_elements() != want.num_elements()) {
    return absl::InvalidArgumentError(absl::StrCat("moe output must be ", want.DebugString(), ", got ",
                                                   out.desc.DebugString()));
  }
  if (in.x.desc.dtype != DType::kBf16 || in.topk_ids.desc.dtype != DType::kInt32) {
    return absl::InvalidArgumentError("moe: x must be bf16 and topk_ids int32");
  }
  const bool gate_up = p.stage == MoeStage::kGateUp || p.stage == MoeStage::kLayer;
  const bool down = p.stage == MoeStage::kDown || p.stage == MoeStage::kLayer;
  const bool weighted = p.stage == MoeStage::kLayer || (p.stage == MoeStage::kDown && p.weighted_sum);
  if (gate_up) KS_RETURN_IF_ERROR(CheckWeights("w13", in.w13, in.w13_scales, p.experts, 2 * p.inter, p.hidden));
  if (down) KS_RETURN_IF_ERROR(CheckWeights("w2", in.w2, in.w2_scales, p.experts, p.out_dim, p.inter));
  if (weighted && (in.topk_weights.empty() || in.topk_weights.desc.dtype != DType::kFp32)) {
    return absl::InvalidArgumentError("moe: topk_weights must be fp32 [T,top_k]");
  }
  // Large batches run in chunks of tokens so the fp32 per-pair buffers stay bounded.
  const int64_t out_per_token = want.num_elements() / std::max<int64_t>(p.tokens, 1);
  const int64_t x_per_token = in.x.desc.num_elements() / std::max<int64_t>(p.tokens, 1);
  for (int64_t t0 = 0; t0 < p.tokens; t0 += kTokenChunk) {
    const int64_t t1 = std::min(p.tokens, t0 + kTokenChunk);
    KS_RETURN_IF_ERROR(MoeTokens(p, in, t0, t1, in.x.as<const uint16_t>() + t0 * x_per_token,
                                 out.as<uint16_t>() + t0 * out_per_token, threads));
  }
  return absl::OkStatus();
}

}  // namespace cpu
}  // namespace kernelserve
