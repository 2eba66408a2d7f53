// Calls the host-side launch tests of both GPU backends build (CUDA's
// argument conversion, gfx942's launch plans), so that the two backends are
// checked on the same shapes. Plain C++: no device, no GPU headers. Test-only.
#ifndef KERNELSERVE_KERNELS_GPU_LAUNCH_TEST_FIXTURES_H_
#define KERNELSERVE_KERNELS_GPU_LAUNCH_TEST_FIXTURES_H_

#include <cstdint>
#include <initializer_list>

#include "absl/status/status.h"
#include "kernels/api/ops.h"
#include "kernels/api/tensor.h"

namespace kernelserve {
namespace gpu_test {

inline HostTensor Int32s(std::initializer_list<int32_t> v) {
  HostTensor t(DType::kInt32, {static_cast<int64_t>(v.size())});
  int i = 0;
  for (int32_t x : v) t.data<int32_t>()[i++] = x;
  return t;
}

// Distinct fake device addresses: a launch plan only passes them on, so a
// view that lands in the wrong field shows.
inline void* FakeAddr(uintptr_t a) { return reinterpret_cast<void*>(a); }

// A paged, ragged MLA decode call: two requests of 40 and 9 tokens over a
// 64-row pool in pages of 8 (5 and 2 pages), `q_lens` query rows each,
// validated; the views sit at fake addresses (q_lat 0x1000, q_pe 0x2000,
// pool 0x3000, seq_lens 0x5000, kv_indices 0x6000, kv_indptr 0x7000,
// q_lens 0x8000). The index tensors live as long as the call.
struct MlaPagedRaggedCall {
  MlaDecodeParams p;
  HostTensor seq = Int32s({40, 9});
  HostTensor idx = Int32s({3, 0, 1, 2, 5, 7, 6});
  HostTensor indptr = Int32s({0, 5, 7});
  HostTensor qls;
  MlaDecodeInputs in;
  absl::Status validated;

  // q_len is the padded query length, at least each of q_lens.
  MlaPagedRaggedCall(int64_t q_len, int64_t heads, int32_t q_len0, int32_t q_len1) : qls(Int32s({q_len0, q_len1})) {
    const TensorDesc q{DType::kBf16, {2, q_len, heads, kMlaLatentDim}};
    const TensorDesc pe{DType::kBf16, {2, q_len, heads, kMlaRopeDim}};
    const TensorDesc pool{DType::kFp8E4M3Fnuz, {64, kMlaRowDim}};
    validated = p.Validate(q, pe, pool, true, 8, &seq, &idx, &indptr, &qls);
    in.q_lat = TensorView{q, FakeAddr(0x1000)};
    in.q_pe = TensorView{pe, FakeAddr(0x2000)};
    in.kv = TensorView{pool, FakeAddr(0x3000)};
    in.seq_lens = TensorView{seq.desc(), FakeAddr(0x5000)};
    in.kv_indices = TensorView{idx.desc(), FakeAddr(0x6000)};
    in.kv_indptr = TensorView{indptr.desc(), FakeAddr(0x7000)};
    in.q_lens = TensorView{qls.desc(), FakeAddr(0x8000)};
  }
  MlaPagedRaggedCall(const MlaPagedRaggedCall&) = delete;
  MlaPagedRaggedCall& operator=(const MlaPagedRaggedCall&) = delete;
};

// The Kimi-K3 TP8 shard's MoE params, as MoeParams::Validate fills them.
inline MoeParams KimiMoeParams(MoeStage stage, int64_t tokens) {
  MoeParams p;
  p.stage = stage;
  p.swiglu = stage == MoeStage::kLayer;
  p.weighted_sum = stage == MoeStage::kLayer;
  p.tokens = tokens;
  p.top_k = 16;
  p.experts = 896;
  p.hidden = 3584;
  p.inter = 384;
  p.out_dim = 3584;
  return p;
}

}  // namespace gpu_test
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_LAUNCH_TEST_FIXTURES_H_
