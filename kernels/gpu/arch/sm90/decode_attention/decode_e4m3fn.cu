// Decode attention over a pool of fp8 e4m3fn rows (hardware e4m3 -> f16 conversion, exact): every head_dim and m-tile count
// of decode_kernel.cuh for this format.
#include "kernels/gpu/arch/sm90/decode_attention/decode_kernel.cuh"
#include "kernels/gpu/arch/sm90/decode_attention/decode_sm90_kernels.h"

namespace kernelserve {
namespace gpu {
namespace decode {

DecodeKernel DecodeKernelE4m3fn(int head_dim, int mt) { return MakeDecodeKernel<KvFormat::kE4m3fn>(head_dim, mt); }

}  // namespace decode
}  // namespace gpu
}  // namespace kernelserve
