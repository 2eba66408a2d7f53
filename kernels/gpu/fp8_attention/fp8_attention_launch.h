// Plain C++ launcher of the FP8 attention kernels (no absl, so nvcc compiles
// it alone); fp8_attention.cc wraps it into the Backend-facing API.
#ifndef KERNELSERVE_KERNELS_CUDA_FP8_ATTENTION_FP8_ATTENTION_LAUNCH_H_
#define KERNELSERVE_KERNELS_CUDA_FP8_ATTENTION_FP8_ATTENTION_LAUNCH_H_

#include <cuda_runtime.h>
#include <cstdint>

namespace kernelserve {
namespace cuda_fp8 {

constexpr int kKernelMmaSync = 0;
constexpr int kKernelQgmma = 1;

struct Fp8AttentionArgs {
  // bf16 inputs (quantized here) or e4m3fn codes with fp32 descales.
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const float* q_descale = nullptr;  // FP8 inputs: [1] or [B*Hq]
  const float* k_descale = nullptr;  // [1] or [B*Hkv]
  const float* v_descale = nullptr;
  bool q_descale_per_head = false, k_descale_per_head = false, v_descale_per_head = false;
  bool fp8_inputs = false;
  bool hadamard = false;   // bf16 inputs: rotate Q and K before quantizing
  bool per_head = false;   // bf16 inputs: one descale per (b, h)
  bool bshd = false;       // layout: [B,S,H,D] (else [B,H,S,D])
  bool causal = true;
  int p_mode = 1;          // PMode: 1 exact, 2 lean, 3 naive
  // Which kernel: kKernelMmaSync (fp8_attention_kernel.cu) or kKernelQgmma
  // (wgmma e4m3, fp8_attention_qgmma.cu, what the backend serves; (128, 128)
  // only, other head shapes fall back to mma.sync).
  int kernel = kKernelMmaSync;
  int rounding = 1;        // Rounding of the bf16 output
  int batch = 0, heads_q = 0, heads_kv = 0, seq_q = 0, seq_kv = 0, d_qk = 0, d_v = 0;
  double scale = 0;        // softmax scale
  void* out = nullptr;     // bf16, layout of q, d_v wide
  // Optional: where the quantized codes and descales go (tests, error split).
  uint8_t* q_codes_out = nullptr;
  uint8_t* k_codes_out = nullptr;
  uint8_t* v_codes_out = nullptr;
  float* descales_out = nullptr;  // [B*Hq] q, then [B*Hkv] k, then [B*Hkv] v (expanded)
};

// Empty when served, else why not (-> UNIMPLEMENTED).
const char* Fp8AttentionUnsupported(const Fp8AttentionArgs& a);

cudaError_t LaunchFp8Attention(const Fp8AttentionArgs& a, cudaStream_t stream);

}  // namespace cuda_fp8
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_CUDA_FP8_ATTENTION_FP8_ATTENTION_LAUNCH_H_
