#include "kernels/gpu/attention/attention_params.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kernelserve {
namespace gpu {
namespace attention {
namespace {

absl::Status CheckView(const char* name, const TensorView& t, const Shape& want) {
  if (t.desc.dtype != DType::kBf16) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": expected bf16, got ", DTypeName(t.desc.dtype)));
  }
  if (t.desc.shape != want) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": expected shape ", ShapeString(want),
                                                   " (from the validated params), got ", ShapeString(t.desc.shape)));
  }
  if (t.data == nullptr) return absl::InvalidArgumentError(absl::StrCat(name, ": no data"));
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0) {
    return absl::UnimplementedError(absl::StrCat(name, ": the GPU attention kernels need 16-byte aligned data"));
  }
  return absl::OkStatus();
}

Shape AttnShape(Layout layout, int64_t b, int64_t h, int64_t s, int64_t d) {
  return layout == Layout::kBhsd ? Shape{b, h, s, d} : Shape{b, s, h, d};
}

// Strides in elements of a [B,H,S,D] or [B,S,H,D] tensor.
void Strides(Layout layout, int64_t h, int64_t s, int64_t d, int64_t* batch, int64_t* head, int64_t* row) {
  *batch = h * s * d;
  if (layout == Layout::kBhsd) {
    *head = s * d;
    *row = d;
  } else {
    *head = d;
    *row = h * d;
  }
}

}  // namespace

absl::StatusOr<FlashFwdParams> MakeFlashFwdParams(const AttentionParams& p, const TensorView& q,
                                                  const TensorView& k, const TensorView& v,
                                                  const TensorView& out) {
  const int64_t d = p.head_dim;
  if (d != 64 && d != 128 && d != 256) {
    return absl::UnimplementedError(
        absl::StrCat("gpu attention: head_dim ", d, " (kernels exist for 64, 128 and 256)"));
  }
  if (p.heads_kv <= 0 || p.heads_q % p.heads_kv != 0) {
    return absl::InvalidArgumentError("gpu attention: params not validated (heads)");
  }
  constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max() / 2;
  constexpr int64_t kMaxGrid = 65535;
  if (p.seq_q > kMaxInt || p.seq_kv > kMaxInt || p.heads_q > kMaxGrid || p.batch > kMaxGrid) {
    return absl::UnimplementedError(absl::StrCat(
        "gpu attention: sizes beyond the kernel's grid (batch and heads <= 65535, sequences < 2^30): B=", p.batch,
        " Hq=", p.heads_q, " Sq=", p.seq_q, " Skv=", p.seq_kv));
  }
  const Shape q_shape = AttnShape(p.layout, p.batch, p.heads_q, p.seq_q, d);
  const Shape kv_shape = AttnShape(p.layout, p.batch, p.heads_kv, p.seq_kv, d);
  KS_RETURN_IF_ERROR(CheckView("q", q, q_shape));
  KS_RETURN_IF_ERROR(CheckView("k", k, kv_shape));
  KS_RETURN_IF_ERROR(CheckView("v", v, kv_shape));
  KS_RETURN_IF_ERROR(CheckView("out", out, q_shape));

  FlashFwdParams fp;
  fp.batch = static_cast<int>(p.batch);
  fp.heads_q = static_cast<int>(p.heads_q);
  fp.heads_kv = static_cast<int>(p.heads_kv);
  fp.seq_q = static_cast<int>(p.seq_q);
  fp.seq_kv = static_cast<int>(p.seq_kv);
  if (!HasWork(fp)) return fp;
  if (!(p.scale > 0) || !std::isfinite(p.scale)) {
    return absl::InvalidArgumentError("gpu attention: params not validated (scale)");
  }
  fp.q = q.data;
  fp.k = k.data;
  fp.v = v.data;
  fp.o = out.data;
  Strides(p.layout, p.heads_q, p.seq_q, d, &fp.q_batch_stride, &fp.q_head_stride, &fp.q_row_stride);
  Strides(p.layout, p.heads_kv, p.seq_kv, d, &fp.k_batch_stride, &fp.k_head_stride, &fp.k_row_stride);
  Strides(p.layout, p.heads_kv, p.seq_kv, d, &fp.v_batch_stride, &fp.v_head_stride, &fp.v_row_stride);
  Strides(p.layout, p.heads_q, p.seq_q, d, &fp.o_batch_stride, &fp.o_head_stride, &fp.o_row_stride);
  fp.group = static_cast<int>(p.heads_q / p.heads_kv);
  fp.causal_offset = static_cast<int>(p.seq_kv - p.seq_q);
  fp.scale_log2 = static_cast<float>(p.scale * 1.4426950408889634);
  fp.rounding = static_cast<int>(p.rounding);
  return fp;
}

}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve
