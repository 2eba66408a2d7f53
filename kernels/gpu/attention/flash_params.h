// Device-side parameters of the bf16 MHA forward kernel and the entry point
// of each explicit instantiation. Host arguments (AttentionParams + views)
// become a FlashFwdParams in attention_cuda.cc; this header has no device
// code, so host-only files include it too.
#ifndef KERNELSERVE_KERNELS_CUDA_ATTENTION_FLASH_PARAMS_H_
#define KERNELSERVE_KERNELS_CUDA_ATTENTION_FLASH_PARAMS_H_

#include <cstdint>

#include <cuda_runtime_api.h>

namespace kernelserve {
namespace gpu {

// Rounding of the bf16 output; values as kernelserve::Rounding.
enum FlashRounding : int { kFlashRtne = 1, kFlashRtna = 2, kFlashRtz = 3 };

struct FlashFwdParams {
  const void* q = nullptr;  // bf16
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  // Strides in elements. BHSD and BSHD differ only here.
  int64_t q_batch_stride = 0, q_head_stride = 0, q_row_stride = 0;
  int64_t k_batch_stride = 0, k_head_stride = 0, k_row_stride = 0;
  int64_t v_batch_stride = 0, v_head_stride = 0, v_row_stride = 0;
  int64_t o_batch_stride = 0, o_head_stride = 0, o_row_stride = 0;
  int batch = 0, heads_q = 0, heads_kv = 0, seq_q = 0, seq_kv = 0;
  int group = 1;             // heads_q / heads_kv (GQA)
  int causal_offset = 0;     // seq_kv - seq_q: bottom-right aligned mask
  float scale_log2 = 0;      // softmax scale * log2(e), > 0
  int rounding = kFlashRtne;
};

// One explicit instantiation per (head dim, causal), each in its own .cu file.
template <int kHeadDim, bool kCausal>
cudaError_t RunFlashFwd(const FlashFwdParams& params, cudaStream_t stream);

// The sm_90a wgmma kernel (kernels/cuda/attention/sm90/), head dim 128 only.
template <bool kCausal>
cudaError_t RunFlashFwdSm90Hdim128(const FlashFwdParams& params, cudaStream_t stream);

// The warp-specialized sm_90a kernel (TMA producer, ping-ponging wgmma
// consumers; sm90/flash_fwd_sm90_ws.h), head dim 128 only. Not the default.
template <bool kCausal>
cudaError_t RunFlashFwdSm90WsHdim128(const FlashFwdParams& params, cudaStream_t stream);

// Test hook for the epilogue's rounding functions: out[i] = bf16 bits of
// in[i] rounded in `rounding` by the same device function the kernel uses.
cudaError_t RoundToBf16OnDevice(const float* in, uint16_t* out, int64_t n, int rounding,
                                cudaStream_t stream);

}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_CUDA_ATTENTION_FLASH_PARAMS_H_
