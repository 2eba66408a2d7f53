// The wgmma MoE gate/up GEMM with 192 x 192 tiles, both epilogues. They
// share this file, SwiGLU first: how nvcc unswitches the bf16 epilogue's
// loop over the rounding mode depends on the other functions of the
// translation unit, and in this order the bf16 kernel compiles to the code
// its tests and bench/NOTES.md's timings ran (bench/tools/cubin_text_hashes.py).
#include "kernels/gpu/arch/sm90/moe/wgmma_gate_up.cuh"

namespace kernelserve {
namespace gpu {
namespace moe {

template cudaError_t LaunchWgmmaGateUp<192, kEpiSwiglu>(const GemmParams&, int64_t, cudaStream_t);
template cudaError_t LaunchWgmmaGateUp<192, kEpiBf16>(const GemmParams&, int64_t, cudaStream_t);

}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve
