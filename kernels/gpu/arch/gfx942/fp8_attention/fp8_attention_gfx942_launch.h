// The launch of the gfx942 FP8 attention forward (fp8_attention_fwd.hip), as
// pure host functions tested on the CPU: the CTA shape and LDS the kernel is
// compiled for, the kernel of a call (d_qk, mask, P mode), its grid, the
// shapes it serves, and the device parameters of FP8 inputs. The parameters
// are the CUDA kernels' (kernels/gpu/fp8_attention/fp8_kernel_params.h). The
// code object is held to the same figures by
// //kernels/gpu/arch/gfx942/fp8_attention:fp8_attention_gfx942_hip_test.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_GFX942_FP8_ATTENTION_FP8_ATTENTION_GFX942_LAUNCH_H_
#define KERNELSERVE_KERNELS_GPU_ARCH_GFX942_FP8_ATTENTION_FP8_ATTENTION_GFX942_LAUNCH_H_

namespace kernelserve {
namespace gpu {
namespace fp8_attention {
namespace gfx942 {

constexpr int kThreads = 256;  // four wave64s, 16 query rows each
constexpr int kRows = 64;      // query rows per CTA
constexpr int kTile = 64;      // keys per LDS tile: one P block
constexpr int kDv = 128;
// LDS rows padded by 8 bytes (the operands are 8-byte reads).
constexpr int KRowBytes(int d_qk) { return d_qk + 8; }
constexpr int kVtRowBytes = kTile + 8;  // V^T: one row per d, 64 keys
constexpr int LdsBytes(int d_qk) { return kTile * KRowBytes(d_qk) + kDv * kVtRowBytes; }  // 17920 / 22016

// P modes (PMode's values), the kernels' template argument.
constexpr int kExact = 1, kLean = 2, kNaive = 3;

// The kernels' C names: KsFp8AttnGfx942D<d_qk>{Causal,Full}{Exact,Lean,Naive}.
constexpr const char* kKernels[2][2][3] = {
    {{"KsFp8AttnGfx942D128FullExact", "KsFp8AttnGfx942D128FullLean", "KsFp8AttnGfx942D128FullNaive"},
     {"KsFp8AttnGfx942D128CausalExact", "KsFp8AttnGfx942D128CausalLean", "KsFp8AttnGfx942D128CausalNaive"}},
    {{"KsFp8AttnGfx942D192FullExact", "KsFp8AttnGfx942D192FullLean", "KsFp8AttnGfx942D192FullNaive"},
     {"KsFp8AttnGfx942D192CausalExact", "KsFp8AttnGfx942D192CausalLean", "KsFp8AttnGfx942D192CausalNaive"}},
};

}  // namespace gfx942
}  // namespace fp8_attention
}  // namespace gpu
}  // namespace kernelserve

#if !defined(__HIP_DEVICE_COMPILE__)
#include <string>

#include "absl/status/statusor.h"
#include "kernels/api/ops.h"
#include "kernels/api/tensor.h"
#include "kernels/gpu/fp8_attention/fp8_kernel_params.h"
#include "kernels/gpu/fp8_attention/fp8_quantize_plan.h"

namespace kernelserve {
namespace gpu {
namespace fp8_attention {
namespace gfx942 {

// Empty when the kernels serve validated `p`, else why not: e4m3fnuz,
// (d_qk, d_v) = (128 | 192, 128), a P mode, heads_q a multiple of heads_kv.
std::string Unsupported(const Fp8AttentionParams& p);

// The kernel of a served call.
const char* KernelName(const Fp8AttentionParams& p);

struct Grid {
  unsigned x = 1, y = 1, z = 1;  // (query-row blocks, query heads, batch)
};
Grid GridOf(const Fp8AttentionParams& p);

// The device parameters over FP8 inputs (codes and their descales in device
// memory) or, for bf16 inputs, over `quantized` (their quantization, which
// the caller runs first), and `out`; INVALID_ARGUMENT when `out` is not
// p.OutputDesc() or bf16 inputs come without a plan.
absl::StatusOr<Fp8KernelParams> MakeParams(const Fp8AttentionParams& p, const Fp8AttentionInputs& in,
                                           const QuantizePlan* quantized, const TensorView& out);

}  // namespace gfx942
}  // namespace fp8_attention
}  // namespace gpu
}  // namespace kernelserve
#endif  // !__HIP_DEVICE_COMPILE__

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_GFX942_FP8_ATTENTION_FP8_ATTENTION_GFX942_LAUNCH_H_
