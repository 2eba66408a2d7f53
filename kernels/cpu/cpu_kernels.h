// The cpu backend's op entry points, shared by cpu_backend.cc and the
// per-op files. Params have passed Validate; views point into host memory.
#ifndef KERNELSERVE_KERNELS_CPU_CPU_KERNELS_H_
#define KERNELSERVE_KERNELS_CPU_CPU_KERNELS_H_

#include "absl/status/status.h"
#include "kernels/api/ops.h"
#include "kernels/api/tensor.h"

namespace kernelserve {
namespace cpu {

absl::Status Attention(const AttentionParams& p, const TensorView& q, const TensorView& k,
                       const TensorView& v, TensorView& out, int threads);
absl::Status Fp8Attention(const Fp8AttentionParams& p, const Fp8AttentionInputs& in,
                          TensorView& out, int threads);
absl::Status MlaDecode(const MlaDecodeParams& p, const MlaDecodeInputs& in, TensorView& out,
                       int threads);
absl::Status Moe(const MoeParams& p, const MoeInputs& in, TensorView& out, int threads);
// Reads the pool rows of in.kv in place.
absl::Status DecodeAttention(const DecodeAttentionParams& p, const DecodeAttentionInputs& in,
                             TensorView& out, int threads);

}  // namespace cpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_CPU_CPU_KERNELS_H_
