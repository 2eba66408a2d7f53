#include "kernels/gpu/attention/attention_cuda.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "kernels/api/status_macros.h"
#include "kernels/gpu/attention/flash_params.h"
#include "kernels/gpu/common/gpu_status.h"

namespace kernelserve {
namespace gpu {
namespace {

absl::Status CheckView(const char* name, const TensorView& t, const Shape& want) {
  if (t.desc.dtype != DType::kBf16) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": expected bf16, got ", DTypeName(t.desc.dtype)));
  }
  if (t.desc.shape != want) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": expected shape ", ShapeString(want),
                                                   " (from the validated params), got ",
                                                   ShapeString(t.desc.shape)));
  }
  if (t.data == nullptr) return absl::InvalidArgumentError(absl::StrCat(name, ": no data"));
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0) {
    return absl::UnimplementedError(
        absl::StrCat(name, ": the CUDA attention kernel needs 16-byte aligned data"));
  }
  return absl::OkStatus();
}

Shape AttnShape(Layout layout, int64_t b, int64_t h, int64_t s, int64_t d) {
  return layout == Layout::kBhsd ? Shape{b, h, s, d} : Shape{b, s, h, d};
}

// Strides in elements of a [B,H,S,D] or [B,S,H,D] tensor.
void Strides(Layout layout, int64_t h, int64_t s, int64_t d, int64_t* batch, int64_t* head,
             int64_t* row) {
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

// kAuto takes the warp-specialized wgmma kernel at d128: on the H200
// (2026-12-02) it passed every GPU test, gave the same bits as the v3 wgmma
// kernel, and ran 570-671 TFLOP/s against v3's 403-440 and mma.sync's 340-379
// (bench/RESULTS.md).
constexpr bool kWsDefaultAtD128 = true;

absl::Status RunAttention(const AttentionParams& p, const TensorView& q, const TensorView& k,
                          const TensorView& v, TensorView& out, cudaStream_t stream,
                          AttentionKernel kernel) {
  const int64_t d = p.head_dim;
  if (d != 64 && d != 128 && d != 256) {
    return absl::UnimplementedError(
        absl::StrCat("cuda attention: head_dim ", d, " (kernels exist for 64, 128 and 256)"));
  }
  if (p.heads_kv <= 0 || p.heads_q % p.heads_kv != 0) {
    return absl::InvalidArgumentError("cuda attention: params not validated (heads)");
  }
  constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max() / 2;
  constexpr int64_t kMaxGrid = 65535;
  if (p.seq_q > kMaxInt || p.seq_kv > kMaxInt || p.heads_q > kMaxGrid || p.batch > kMaxGrid) {
    return absl::UnimplementedError(absl::StrCat(
        "cuda attention: sizes beyond the kernel's grid (batch and heads <= 65535, "
        "sequences < 2^30): B=",
        p.batch, " Hq=", p.heads_q, " Sq=", p.seq_q, " Skv=", p.seq_kv));
  }
  const Shape q_shape = AttnShape(p.layout, p.batch, p.heads_q, p.seq_q, d);
  const Shape kv_shape = AttnShape(p.layout, p.batch, p.heads_kv, p.seq_kv, d);
  KS_RETURN_IF_ERROR(CheckView("q", q, q_shape));
  KS_RETURN_IF_ERROR(CheckView("k", k, kv_shape));
  KS_RETURN_IF_ERROR(CheckView("v", v, kv_shape));
  KS_RETURN_IF_ERROR(CheckView("out", out, q_shape));
  if (p.batch == 0 || p.heads_q == 0 || p.seq_q == 0) return absl::OkStatus();
  if (!(p.scale > 0) || !std::isfinite(p.scale)) {
    return absl::InvalidArgumentError("cuda attention: params not validated (scale)");
  }

  FlashFwdParams fp;
  fp.q = q.data;
  fp.k = k.data;
  fp.v = v.data;
  fp.o = out.data;
  Strides(p.layout, p.heads_q, p.seq_q, d, &fp.q_batch_stride, &fp.q_head_stride,
          &fp.q_row_stride);
  Strides(p.layout, p.heads_kv, p.seq_kv, d, &fp.k_batch_stride, &fp.k_head_stride,
          &fp.k_row_stride);
  Strides(p.layout, p.heads_kv, p.seq_kv, d, &fp.v_batch_stride, &fp.v_head_stride,
          &fp.v_row_stride);
  Strides(p.layout, p.heads_q, p.seq_q, d, &fp.o_batch_stride, &fp.o_head_stride,
          &fp.o_row_stride);
  fp.batch = static_cast<int>(p.batch);
  fp.heads_q = static_cast<int>(p.heads_q);
  fp.heads_kv = static_cast<int>(p.heads_kv);
  fp.seq_q = static_cast<int>(p.seq_q);
  fp.seq_kv = static_cast<int>(p.seq_kv);
  fp.group = static_cast<int>(p.heads_q / p.heads_kv);
  fp.causal_offset = static_cast<int>(p.seq_kv - p.seq_q);
  fp.scale_log2 = static_cast<float>(p.scale * 1.4426950408889634);
  fp.rounding = static_cast<int>(p.rounding);

  const bool ws = kernel == AttentionKernel::kWgmmaWs ||
                  (kernel == AttentionKernel::kAuto && d == 128 && kWsDefaultAtD128);
  const bool wgmma = kernel == AttentionKernel::kWgmma;
  if ((wgmma || ws) && d != 128) {
    return absl::UnimplementedError(
        absl::StrCat("cuda attention: the wgmma kernels exist for head_dim 128 only, got ", d));
  }
  cudaError_t e;
  if (ws) {
    e = p.causal ? RunFlashFwdSm90WsHdim128<true>(fp, stream)
                 : RunFlashFwdSm90WsHdim128<false>(fp, stream);
    return GpuStatus(e, absl::StrCat("cuda attention launch (wgmma-ws d128",
                                     p.causal ? ", causal)" : ")"));
  }
  if (wgmma) {
    e = p.causal ? RunFlashFwdSm90Hdim128<true>(fp, stream)
                 : RunFlashFwdSm90Hdim128<false>(fp, stream);
    return GpuStatus(e, absl::StrCat("cuda attention launch (wgmma d128",
                                     p.causal ? ", causal)" : ")"));
  }
  switch (d) {
    case 64:
      e = p.causal ? RunFlashFwd<64, true>(fp, stream) : RunFlashFwd<64, false>(fp, stream);
      break;
    case 128:
      e = p.causal ? RunFlashFwd<128, true>(fp, stream) : RunFlashFwd<128, false>(fp, stream);
      break;
    default:
      e = p.causal ? RunFlashFwd<256, true>(fp, stream) : RunFlashFwd<256, false>(fp, stream);
      break;
  }
  return GpuStatus(e, absl::StrCat("cuda attention launch (d", d, p.causal ? ", causal)" : ")"));
}

absl::Status RoundToBf16(const float* in, uint16_t* out, int64_t n, Rounding mode,
                         cudaStream_t stream) {
  return GpuStatus(RoundToBf16OnDevice(in, out, n, static_cast<int>(mode), stream),
                   "bf16 rounding kernel");
}

}  // namespace gpu
}  // namespace kernelserve
