// Host entry of the CUDA bf16 MHA forward (DESIGN §4): checks the views
// against validated params, builds the device params and launches the
// instantiation for the head dim and mask. Asynchronous on `stream`.
#ifndef KERNELSERVE_KERNELS_CUDA_ATTENTION_ATTENTION_CUDA_H_
#define KERNELSERVE_KERNELS_CUDA_ATTENTION_ATTENTION_CUDA_H_

#include <cstdint>

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "kernels/api/ops.h"
#include "kernels/api/tensor.h"

namespace kernelserve {
namespace gpu {

// Which kernel runs. kAuto is the default choice per head dim (see
// attention_cuda.cc: kWgmmaWs at head dim 128, mma.sync otherwise); the
// others force one, for tests and benchmarks. The wgmma kernels exist for
// head dim 128 only (UNIMPLEMENTED otherwise): kWgmma is v3 (both warpgroups
// load and compute in lockstep), kWgmmaWs v4, warp-specialized (a TMA
// producer warpgroup, two consumer warpgroups ping-ponging; bench/NOTES.md).
enum class AttentionKernel { kAuto, kMmaSync, kWgmma, kWgmmaWs };

// Head dims 64, 128, 256 (others: UNIMPLEMENTED). Pointers must be 16-byte
// aligned. Launch errors come back as a status (UNAVAILABLE for sticky faults).
absl::Status RunAttention(const AttentionParams& p, const TensorView& q, const TensorView& k,
                          const TensorView& v, TensorView& out, cudaStream_t stream,
                          AttentionKernel kernel = AttentionKernel::kAuto);

// Rounds n floats (device memory) to bf16 bits with the kernel's epilogue
// rounding; for testing the device rounding against numerics::FloatToBf16.
absl::Status RoundToBf16(const float* in, uint16_t* out, int64_t n, Rounding mode,
                         cudaStream_t stream);

}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_CUDA_ATTENTION_ATTENTION_CUDA_H_
