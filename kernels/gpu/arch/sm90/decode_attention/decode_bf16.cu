// Decode attention over a pool of bf16 rows (cp.async straight into swizzled tiles): every head_dim and m-tile count
// of decode_kernel.cuh for this format.
#include "kernels/gpu/arch/sm90/decode_attention/decode_kernel.cuh"
#include "kernels/gpu/arch/sm90/decode_attention/decode_sm90_kernels.h"

namespace kernelserve {
namespace gpu {
namespace decode {

DecodeKernel DecodeKernelBf16(int head_dim, int mt) { return MakeDecodeKernel<KvFormat::kBf16>(head_dim, mt); }

}  // namespace decode
}  // namespace gpu
}  // namespace kernelserve
