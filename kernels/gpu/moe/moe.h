// MXFP4 mixture-of-experts on CUDA sm_90a: the entry point the CUDA backend
// calls. Routing runs on the GPU (no host synchronization, graph
// capturable); weights are dequantized exactly to bf16 in shared memory and
// multiplied on the tensor cores with fp32 accumulation; outputs are rounded
// once to bf16 in p.rounding. Results are deterministic run to run (the
// weighted down sum runs per token in a fixed order, without float atomics).
#ifndef KERNELSERVE_KERNELS_CUDA_MOE_MOE_H_
#define KERNELSERVE_KERNELS_CUDA_MOE_MOE_H_

#include <cuda_runtime_api.h>  // cudaStream_t

#include "absl/status/status.h"
#include "kernels/api/ops.h"
#include "kernels/api/tensor.h"

namespace kernelserve {
namespace gpu {

// All views are device memory; `p` has passed MoeParams::Validate.
absl::Status RunMoe(const MoeParams& p, const MoeInputs& in, TensorView& out, cudaStream_t stream);

// Same with the expert row tile forced (0: chosen from the shape; 16, 64 or
// 128), for tests and benchmarks.
absl::Status RunMoeWithTile(int tile_rows, const MoeParams& p, const MoeInputs& in, TensorView& out,
                            cudaStream_t stream);

// GEMM kernel of the gate/up projection: kAuto as RunMoe/RunMoeWithTile
// choose it (for gate/up alone at >= 72 rows per expert with no tile forced,
// kWgmmaSw or kWgmmaWideSw, whichever launches fewer CTAs; else mma.sync), kMmaSync the mma.sync kernel, kWgmma the
// sm_90a wgmma kernel with 128-row x 256-weight-row tiles (also inside a
// layer, whose down half stays mma.sync), kWgmmaTall the same with 256 x 128
// tiles for gate/up alone (a layer is UNIMPLEMENTED), kWgmmaSw kWgmma with
// both operands in the 128-byte-swizzled layout, kWgmmaWide 192 x 192 tiles
// (3 warpgroups) and kWgmmaWideSw the same swizzled, both for gate/up alone.
// The wgmma ones ignore `tile_rows`.
enum class MoeGemm {
  kAuto = 0,
  kMmaSync = 1,
  kWgmma = 2,
  kWgmmaTall = 3,
  kWgmmaSw = 4,
  kWgmmaWide = 5,
  kWgmmaWideSw = 6,
};
// What kAuto runs for the shape: kMmaSync, kWgmmaSw or kWgmmaWideSw.
MoeGemm AutoMoeGemm(const MoeParams& p);
absl::Status RunMoeWithGemm(MoeGemm gemm, int tile_rows, const MoeParams& p, const MoeInputs& in,
                            TensorView& out, cudaStream_t stream);

}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_CUDA_MOE_MOE_H_
