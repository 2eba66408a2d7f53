// Parameter structs for every op and their shared validation. One Validate
// per op, used by every backend and by the server, so a bad request gets the
// same INVALID_ARGUMENT message everywhere (DESIGN §1). Validate checks
// descriptors and, for the small index tensors of MLA decode and MoE, their
// values (passed as host tensors); it fills the derived dims in the params.
#ifndef KERNELSERVE_KERNELS_API_OPS_H_
#define KERNELSERVE_KERNELS_API_OPS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "common/status_macros.h"
#include "kernels/api/tensor.h"

namespace kernelserve {

// Values match proto kernelserve.v1.Rounding (0 = unspecified = RTNE).
enum class Rounding : int { kRtne = 1, kRtna = 2, kRtz = 3 };
enum class Layout : int { kBhsd = 1, kBshd = 2 };
enum class Fp8Format : int { kE4M3Fn = 1, kE4M3Fnuz = 2 };
enum class PMode : int { kExact = 1, kLean = 2, kNaive = 3 };
enum class DescaleMode : int { kPerTensor = 1, kPerHead = 2 };
enum class MoeStage : int { kGateUp = 1, kDown = 2, kLayer = 3 };

std::string RoundingName(Rounding r);  // "rtne"
std::string LayoutName(Layout l);      // "bhsd"
std::string PModeName(PMode m);        // "exact"
std::string Fp8FormatName(Fp8Format f);
DType Fp8FormatDType(Fp8Format f);

// ---------------------------------------------------------------- attention
// bf16 MHA forward. q [B,Hq,Sq,D] (BHSD) or [B,Sq,Hq,D] (BSHD); k, v
// [B,Hkv,Skv,D] or [B,Skv,Hkv,D]; out like q. Causal is bottom-right aligned.
struct AttentionParams {
  Layout layout = Layout::kBhsd;
  bool causal = false;
  std::optional<double> softmax_scale;  // default 1/sqrt(D)
  Rounding rounding = Rounding::kRtne;

  // Filled by Validate.
  int64_t batch = 0, heads_q = 0, heads_kv = 0, seq_q = 0, seq_kv = 0, head_dim = 0;
  double scale = 0;

  absl::Status Validate(const TensorDesc& q, const TensorDesc& k, const TensorDesc& v);
  TensorDesc OutputDesc() const;
  // Element offset of (b, h, s, 0) for a tensor with `heads` heads and `seq` rows.
  int64_t Offset(int64_t b, int64_t h, int64_t s, int64_t heads, int64_t seq, int64_t d) const {
    return layout == Layout::kBhsd ? ((b * heads + h) * seq + s) * d : ((b * seq + s) * heads + h) * d;
  }
};

// ------------------------------------------------------------ FP8 attention
// ZYFA numerics (DESIGN §4). Inputs are either all bf16 (the backend
// quantizes them, optionally after a Hadamard rotation of Q and K) or all FP8
// of `format` with fp32 descales of shape [1] or [B, H(q or kv)].
struct Fp8AttentionParams {
  Layout layout = Layout::kBhsd;
  bool causal = true;
  std::optional<double> softmax_scale;  // default 1/sqrt(Dqk)
  Fp8Format format = Fp8Format::kE4M3Fn;
  PMode p_mode = PMode::kExact;
  bool hadamard = false;
  DescaleMode descale_mode = DescaleMode::kPerTensor;
  Rounding rounding = Rounding::kRtne;

  // Filled by Validate.
  int64_t batch = 0, heads_q = 0, heads_kv = 0, seq_q = 0, seq_kv = 0, d_qk = 0, d_v = 0;
  double scale = 0;
  bool fp8_inputs = false;  // true when q, k, v arrive already quantized

  // Descales are required (and only allowed) with FP8 inputs; pass nullptr otherwise.
  absl::Status Validate(const TensorDesc& q, const TensorDesc& k, const TensorDesc& v,
                        const TensorDesc* q_descale, const TensorDesc* k_descale,
                        const TensorDesc* v_descale);
  TensorDesc OutputDesc() const;
};

struct Fp8AttentionInputs {
  TensorView q, k, v;
  // fp32, [1] or [B,H]; empty for bf16 inputs.
  TensorView q_descale, k_descale, v_descale;
};

// ----------------------------------------------------------- MLA decode
constexpr int64_t kMlaLatentDim = 512;
constexpr int64_t kMlaRopeDim = 64;
constexpr int64_t kMlaRowDim = kMlaLatentDim + kMlaRopeDim;  // 576
constexpr int64_t kMlaMaxQLen = 8;
constexpr int64_t kMlaMaxHeads = 128;

// MLA absorbed decode, bf16 Q against fp8 KV rows of 576 (DESIGN §4).
struct MlaDecodeParams {
  std::optional<double> softmax_scale;  // default 1/sqrt(576)
  double kv_scale = 1.0;
  int64_t num_splits = 0;  // 0: backend's choice
  Rounding rounding = Rounding::kRtne;

  // Filled by Validate.
  int64_t batch = 0, q_len = 0, heads = 0;
  bool paged = false;
  int64_t page_size = 1;      // paged only
  int64_t num_slots = 0;      // paged: pool rows
  int64_t max_seq = 0;        // contiguous: S; paged: max(seq_lens)
  bool has_seq_lens = false;
  bool has_q_lens = false;
  DType kv_dtype = DType::kInvalid;
  double scale = 0;

  // Contiguous: kv [B,S,576]; seq_lens optional ([B], each 1..S). Paged: kv is
  // the pool [num_slots,576]; seq_lens, kv_indices and kv_indptr required
  // (page_size given by the pool). Index tensors are int32. q_lens optional ([B], each 1..q_len, and
  // <= seq_len). Index tensors are host copies so their values can be checked.
  absl::Status Validate(const TensorDesc& q_lat, const TensorDesc& q_pe, const TensorDesc& kv,
                        bool paged, int64_t page_size, const HostTensor* seq_lens,
                        const HostTensor* kv_indices, const HostTensor* kv_indptr,
                        const HostTensor* q_lens);
  TensorDesc OutputDesc() const;
};

struct MlaDecodeInputs {
  TensorView q_lat, q_pe, kv;
  TensorView seq_lens, kv_indices, kv_indptr, q_lens;  // int32; empty when absent
};

// ----------------------------------------------------- decode attention
constexpr int64_t kDecodeMaxQLen = 8;

// Decode attention over a PER_HEAD_KV pool (DESIGN §4, "Decode attention").
// q [B,q_len,Hq,D] bf16, q_len 1..8 (the largest window; an optional q_lens
// [B] gives each request its own window 1..q_len); the pool is
// [num_slots, 2*Hkv*D] of bf16 or fp8: row = K [Hkv,D] then V [Hkv,D], every
// stored element multiplied by the pool's kv_scale. D is 64, 128 or 256; GQA:
// Hq a multiple of Hkv, query head h reads KV head h / (Hq/Hkv). Token j of
// request b lives in slot kv_indices[kv_indptr[b] + j / page_size] *
// page_size + j % page_size. Query t of request b (window qlen_b, seq_len
// s_b tokens, the last qlen_b of them new) sees keys j <= s_b - qlen_b + t
// (bottom-right aligned causal). o = softmax(scale * q.k) v with scale
// defaulting to 1/sqrt(D); fp32 softmax and accumulation in the backends,
// fp64 in the oracle; bf16 out rounded once in `rounding`. Rows past a
// request's window are 0. out [B,q_len,Hq,D] bf16.
struct DecodeAttentionParams {
  std::optional<double> softmax_scale;  // default 1/sqrt(D)
  double kv_scale = 1.0;                // the pool's
  Rounding rounding = Rounding::kRtne;

  // Filled by Validate.
  int64_t batch = 0, q_len = 0, heads_q = 0, heads_kv = 0, head_dim = 0;
  int64_t page_size = 1, num_slots = 0;
  int64_t max_seq = 0;  // max(seq_lens)
  bool has_q_lens = false;
  DType kv_dtype = DType::kInvalid;
  double scale = 0;

  // kv is the pool [num_slots, 2*pool_heads*pool_head_dim]; pool_heads,
  // pool_head_dim and page_size are the pool's. seq_lens [B], kv_indices and
  // kv_indptr [B+1] are required, q_lens optional; all int32 host copies.
  absl::Status Validate(const TensorDesc& q, const TensorDesc& kv, int64_t pool_heads,
                        int64_t pool_head_dim, int64_t page_size, const HostTensor* seq_lens,
                        const HostTensor* kv_indices, const HostTensor* kv_indptr,
                        const HostTensor* q_lens);
  TensorDesc OutputDesc() const;
  // Element offset of K (v = false) or V of KV head `hkv` within a pool row.
  int64_t RowOffset(bool v, int64_t hkv) const { return ((v ? heads_kv : 0) + hkv) * head_dim; }
};

struct DecodeAttentionInputs {
  TensorView q, kv;                                    // kv: the pool rows
  TensorView seq_lens, kv_indices, kv_indptr, q_lens;  // int32; q_lens empty when absent
};

// ----------------------------------------------------------------- MoE
// MXFP4 MoE (DESIGN §4). W13 [E,2I,K] and W2 [E,N,I] packed E2M1 with E8M0
// scales per 32 along the last dim. Pairs are token-major: row t*top_k + r.
struct MoeParams {
  MoeStage stage = MoeStage::kLayer;
  bool swiglu = false;        // gate/up: silu(gate)*up epilogue (always on for layer)
  bool weighted_sum = false;  // down: sum_r w[t,r] * out[t*top_k+r] (always on for layer)
  Rounding rounding = Rounding::kRtne;

  // Filled by Validate.
  int64_t tokens = 0, top_k = 0, experts = 0, hidden = 0 /*K*/, inter = 0 /*I*/, out_dim = 0 /*N*/;

  // x: gate/up and layer [T,K] bf16; down [T*top_k,I] bf16. topk_ids is a
  // host copy (ids checked against E). Unused weights may be nullptr.
  absl::Status Validate(const TensorDesc& x, const HostTensor& topk_ids,
                        const TensorDesc* topk_weights, const TensorDesc* w13,
                        const TensorDesc* w13_scales, const TensorDesc* w2,
                        const TensorDesc* w2_scales);
  TensorDesc OutputDesc() const;
};

struct MoeInputs {
  TensorView x, topk_ids, topk_weights, w13, w13_scales, w2, w2_scales;
};

}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_API_OPS_H_
