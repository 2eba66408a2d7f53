#include "kernels/gpu/attention/attention.h"

#include <atomic>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/gpu/arch/sm90/attention/flash_fwd.h"
#include "kernels/gpu/attention/attention_params.h"
#include "kernels/gpu/attention/round_bf16.h"
#include "kernels/gpu/common/gpu_status.h"

namespace kernelserve {
namespace gpu {
namespace {

using attention::FlashFwdParams;
using attention::WsLaunchOptions;
using FlashFwdLaunch = cudaError_t (*)(const FlashFwdParams&, const WsLaunchOptions&, cudaStream_t);

std::atomic<int> g_dense_tail{-1};
std::atomic<bool> g_per_head_causal_order{false};

// `launch`: the instantiation for the call's head dim and mask, nullptr when
// the kernel has none.
absl::Status Run(const char* kernel, FlashFwdLaunch launch, const AttentionParams& p, const TensorView& q,
                 const TensorView& k, const TensorView& v, TensorView& out, cudaStream_t stream) {
  KS_ASSIGN_OR_RETURN(const FlashFwdParams fp, attention::MakeFlashFwdParams(p, q, k, v, out));
  if (launch == nullptr) {
    return absl::UnimplementedError(
        absl::StrCat(KS_GPU_VENDOR " attention: the ", kernel, " kernel has no head_dim ", p.head_dim));
  }
  if (!attention::HasWork(fp)) return absl::OkStatus();
  // No key at all: every row sees none and is written as zeros, as the
  // kernels write such rows.
  if (fp.seq_kv == 0) {
    const size_t bytes = static_cast<size_t>(out.desc.num_bytes());
    return GpuStatus(cudaMemsetAsync(out.data, 0, bytes, stream), KS_GPU_VENDOR " attention (no keys)");
  }
  WsLaunchOptions options;
  options.dense_tail = g_dense_tail.load(std::memory_order_relaxed);
  options.per_head_causal_order = g_per_head_causal_order.load(std::memory_order_relaxed);
  return GpuStatus(launch(fp, options, stream), absl::StrCat(KS_GPU_VENDOR " attention launch (", kernel, " d", p.head_dim,
                                                    p.causal ? ", causal)" : ")"));
}

}  // namespace

absl::Status RunAttentionWgmmaWs(const AttentionParams& p, const TensorView& q, const TensorView& k,
                                 const TensorView& v, TensorView& out, cudaStream_t stream) {
  FlashFwdLaunch launch = nullptr;
  if (p.head_dim == 64) {
    launch = p.causal ? &attention::RunFlashFwdWs<64, true> : &attention::RunFlashFwdWs<64, false>;
  } else if (p.head_dim == 128) {
    launch = p.causal ? &attention::RunFlashFwdWs<128, true> : &attention::RunFlashFwdWs<128, false>;
  } else if (p.head_dim == 256) {
    launch = p.causal ? &attention::RunFlashFwdWs<256, true> : &attention::RunFlashFwdWs<256, false>;
  }
  return Run("wgmma_ws", launch, p, q, k, v, out, stream);
}

void SetWgmmaWsPlanOverride(int dense_tail, bool per_head_causal_order) {
  g_dense_tail.store(dense_tail, std::memory_order_relaxed);
  g_per_head_causal_order.store(per_head_causal_order, std::memory_order_relaxed);
}

absl::Status RoundToBf16(const float* in, uint16_t* out, int64_t n, Rounding mode, cudaStream_t stream) {
  return GpuStatus(attention::RoundToBf16OnDevice(in, out, n, static_cast<int>(mode), stream),
                   "bf16 rounding kernel");
}

}  // namespace gpu
}  // namespace kernelserve
