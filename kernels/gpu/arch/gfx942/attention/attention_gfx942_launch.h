// The launch of the gfx942 bf16 MHA forward (attention_fwd_bf16.hip), as
// pure host functions tested on the CPU: the CTA shape the kernel is
// compiled for, its grid, and the shapes it serves. The device parameters
// are the CUDA kernels' (kernels/gpu/attention/flash_params.h, from
// MakeFlashFwdParams). The code object is held to the same figures by
// //kernels/gpu/arch/gfx942/attention:attention_gfx942_hip_test.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_GFX942_ATTENTION_ATTENTION_GFX942_LAUNCH_H_
#define KERNELSERVE_KERNELS_GPU_ARCH_GFX942_ATTENTION_ATTENTION_GFX942_LAUNCH_H_

namespace kernelserve {
namespace gpu {
namespace attention {
namespace gfx942 {

constexpr int kThreads = 256;  // four wave64s, 16 query rows each
constexpr int kRows = 64;      // query rows per CTA
constexpr int kTileTok = 16;   // KV tokens per LDS tile: one MFMA k-step of P V
constexpr int kHeadDim = 128;
constexpr int kRowBytes = kHeadDim * 2 + 16;           // a bf16 K or V row in LDS, padded: 272
constexpr int kLdsBytes = 2 * 2 * kTileTok * kRowBytes;  // K and V, double-buffered: 17408

constexpr char kKernel[] = "KsAttentionFwdBf16Gfx942";
constexpr char kCausalKernel[] = "KsAttentionFwdBf16CausalGfx942";

}  // namespace gfx942
}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve

#if !defined(__HIP_DEVICE_COMPILE__)
#include <string>

#include "kernels/api/ops.h"
#include "kernels/gpu/attention/flash_params.h"

namespace kernelserve {
namespace gpu {
namespace attention {
namespace gfx942 {

// Empty when the kernel serves validated `p`, else why not.
std::string Unsupported(const AttentionParams& p);

struct Grid {
  unsigned x = 1, y = 1, z = 1;  // (query-row blocks, query heads, batch)
};
Grid GridOf(const FlashFwdParams& fp);

}  // namespace gfx942
}  // namespace attention
}  // namespace gpu
}  // namespace kernelserve
#endif  // !__HIP_DEVICE_COMPILE__

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_GFX942_ATTENTION_ATTENTION_GFX942_LAUNCH_H_
