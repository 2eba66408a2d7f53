// MLA absorbed decode (a16w8) on CUDA sm_90a: the entry point the CUDA
// backend calls. Scores and outputs accumulate in fp32 and results are
// deterministic run to run. The default (v8, mla_decode_rega.cu) multiplies
// on f16 tensor cores: fp8 KV exactly, Q scaled by one power of two per CTA
// into f16 (exact within 2^31 of the CTA's largest |q|), P rounded to f16,
// the row sum over the unrounded P. The bf16 kernels (v4..v7) round P to
// bf16 and count the rounded values. Tests: rel. RMS < 6e-3 against the fp64
// oracle (measured 1.7e-3, bf16 output rounding).
#ifndef KERNELSERVE_KERNELS_CUDA_MLA_MLA_DECODE_H_
#define KERNELSERVE_KERNELS_CUDA_MLA_MLA_DECODE_H_

#include <cuda_runtime_api.h>  // cudaStream_t

#include "absl/status/status.h"
#include "kernels/api/ops.h"
#include "kernels/api/tensor.h"

namespace kernelserve {
namespace gpu {

// All views are device memory; `p` has passed MlaDecodeParams::Validate.
// Enqueues on `stream` without a host synchronization; the paged path (and
// the contiguous one) may be captured into a CUDA graph: the KV split is a
// function of p (max_seq), so replays must not exceed the captured max_seq.
absl::Status RunMlaDecode(const MlaDecodeParams& p, const MlaDecodeInputs& in, TensorView& out,
                          cudaStream_t stream);

// The kernel versions, for tests and benchmarks: kWgmmaPv runs QK^T and PV on
// wgmma, kWgmma QK^T on wgmma and PV on mma.sync, kMmaSync everything on
// mma.sync, kWgmmaPvSw is kWgmmaPv with 128-byte-swizzled wgmma operands,
// kWgmmaPipe is kWgmmaPv (same output bits) with a double-buffered tile
// (5-7 % slower on the H200), kWgmmaRoles (v7, the default) gives the two
// warpgroups different roles: one computes QK^T on m64n64, the softmax and
// half of PV, the other unpacks most of the next tile and does the other
// half of PV (bench/NOTES.md); kWgmmaRegA (v8) converts the fp8 KV in
// registers straight into the wgmma A operand (f16 tensor cores; e4m3fnuz
// runs kWgmmaRoles). RunMlaDecode uses kDefaultMlaKernel.
enum class MlaKernel { kWgmma, kMmaSync, kWgmmaPv, kWgmmaPvSw, kWgmmaPipe, kWgmmaRoles, kWgmmaRegA };
extern const MlaKernel kDefaultMlaKernel;
absl::Status RunMlaDecodeWith(MlaKernel kernel, const MlaDecodeParams& p, const MlaDecodeInputs& in,
                              TensorView& out, cudaStream_t stream);

}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_CUDA_MLA_MLA_DECODE_H_
