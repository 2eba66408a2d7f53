// Decode attention inputs for the backends' tests (cpu and CUDA): fresh
// random queries and pool rows, and the requests' pages scattered over a pool
// in a random order with NaN codes in every slot no request names, so reading
// outside the page tables shows. Test-only.
#ifndef KERNELSERVE_KERNELS_CPU_DECODE_TEST_INPUTS_H_
#define KERNELSERVE_KERNELS_CPU_DECODE_TEST_INPUTS_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "kernels/api/ops.h"
#include "kernels/api/tensor.h"
#include "kernels/cpu/cpu_test_util.h"
#include "kernels/numerics/numerics.h"
#include "kernels/numerics/test_inputs.h"

namespace kernelserve {
namespace cpu_test {

struct DecodeProblem {
  int64_t b, q_len, hq, hkv, d;
  DType kv_dtype;
  double kv_scale;
  std::vector<int32_t> seq_lens, q_lens;  // q_lens empty: none
  HostTensor q;
  // Each request's token rows [seq_lens[b], 2*hkv*d] in the pool's dtype.
  std::vector<std::vector<uint8_t>> rows;
};

inline int64_t RowBytes(const DecodeProblem &pr) { return NumBytes(pr.kv_dtype, 2 * pr.hkv * pr.d); }

inline DecodeProblem MakeDecodeProblem(int64_t b, int64_t q_len, int64_t hq, int64_t hkv, int64_t d, DType kv_dtype,
                                       std::vector<int32_t> seq_lens, std::vector<int32_t> q_lens, uint64_t seed) {
  const bool fp8 = kv_dtype != DType::kBf16;
  DecodeProblem pr{b, q_len, hq, hkv, d, kv_dtype, fp8 ? 0.25 : 0.5, std::move(seq_lens), std::move(q_lens), {}, {}};
  pr.q = numerics::GaussianBf16({b, q_len, hq, d}, seed);
  numerics::SeededRng rng(seed + 1);
  const int64_t row_elems = 2 * hkv * d;
  for (int64_t r = 0; r < b; ++r) {
    std::vector<uint8_t> bytes(pr.seq_lens[r] * RowBytes(pr));
    for (int64_t e = 0; e < pr.seq_lens[r] * row_elems; ++e) {
      // Stored values of about N(0, 16) (fp8) or N(0, 4) (bf16), so kv_scale
      // brings keys and values to unit scale.
      if (fp8) {
        bytes[e] = numerics::FloatToFp8(static_cast<float>(4 * rng.Normal()), kv_dtype);
      } else {
        const uint16_t h = numerics::FloatToBf16(static_cast<float>(2 * rng.Normal()), Rounding::kRtne);
        std::memcpy(bytes.data() + 2 * e, &h, 2);
      }
    }
    pr.rows.push_back(std::move(bytes));
  }
  return pr;
}

struct Paged {
  HostTensor pool, seq_lens, q_lens, kv_indices, kv_indptr;
};

// Scatters the requests' pages over a pool in a random order; slots no
// request uses hold NaN codes.
inline Paged Scatter(const DecodeProblem &pr, int64_t page_size, uint64_t perm_seed) {
  Paged pg;
  std::vector<int64_t> pages_of(pr.b);
  int64_t total = 0;
  for (int64_t r = 0; r < pr.b; ++r) total += pages_of[r] = (pr.seq_lens[r] + page_size - 1) / page_size;
  const int64_t num_pages = total + 2;
  std::vector<int32_t> perm(num_pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937_64 rng(perm_seed);
  std::shuffle(perm.begin(), perm.end(), rng);
  const int64_t rb = RowBytes(pr);
  pg.pool = HostTensor(pr.kv_dtype, {num_pages * page_size, 2 * pr.hkv * pr.d});
  std::memset(pg.pool.bytes(), 0xFF,
              pg.pool.num_bytes());  // NaN in bf16 and every fp8 format
  std::vector<int32_t> indices, indptr{0};
  int64_t next = 0;
  for (int64_t r = 0; r < pr.b; ++r) {
    for (int64_t g = 0; g < pages_of[r]; ++g) {
      const int32_t page = perm[next++];
      indices.push_back(page);
      for (int64_t j = g * page_size; j < std::min<int64_t>(pr.seq_lens[r], (g + 1) * page_size); ++j) {
        std::memcpy(pg.pool.bytes() + (page * page_size + j - g * page_size) * rb, pr.rows[r].data() + j * rb, rb);
      }
    }
    indptr.push_back(static_cast<int32_t>(indices.size()));
  }
  pg.seq_lens = Int32Tensor(pr.seq_lens);
  if (!pr.q_lens.empty()) pg.q_lens = Int32Tensor(pr.q_lens);
  pg.kv_indices = Int32Tensor(indices);
  pg.kv_indptr = Int32Tensor(indptr);
  return pg;
}

}  // namespace cpu_test
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_CPU_DECODE_TEST_INPUTS_H_
