#include "absl/status/status.h"
#include "kernels/cpu/cpu_kernels.h"

namespace kernelserve {
namespace cpu {

absl::Status Fp8Attention(const Fp8AttentionParams& p, const Fp8AttentionInputs& in, TensorView& out, int threads) {
  return absl::UnimplementedError("fp8_attention is not implemented by the cpu backend yet");
}

}  // namespace cpu
}  // namespace kernelserve
