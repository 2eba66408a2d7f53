// The FP8 attention kernels of this folder as the host entry
// (kernels/gpu/fp8_attention/fp8_attention.cc) launches them on quantized
// operands: one explicit instantiation per (head shape, mask), each in its own
// .cu file, the P mode (PMode: 1 exact, 2 lean, 3 naive) chosen at launch.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM90_FP8_ATTENTION_FP8_KERNELS_H_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM90_FP8_ATTENTION_FP8_KERNELS_H_

#include "kernels/gpu/common/gpu.h"
#include "kernels/gpu/fp8_attention/fp8_kernel_params.h"

namespace kernelserve {
namespace gpu {
namespace fp8_attention {

// Warp-specialized wgmma e4m3 (QGMMA, fp8_ws_*): (d_qk, d_v) = (kDqk, 128),
// kDqk 128 or 192; a TMA producer warpgroup, two consumer warpgroups in
// ping-pong, kStages shared-memory stages of K, raw V and V^T.
template <int kDqk, bool kCausal, int kStages>
cudaError_t LaunchFp8Ws(const Fp8KernelParams& p, int batch, int p_mode, cudaStream_t stream);

}  // namespace fp8_attention
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM90_FP8_ATTENTION_FP8_KERNELS_H_
