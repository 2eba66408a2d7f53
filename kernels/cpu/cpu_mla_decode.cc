#include "absl/status/status.h"
#include "kernels/cpu/cpu_kernels.h"

namespace kernelserve {
namespace cpu {

absl::Status MlaDecode(const MlaDecodeParams& p, const MlaDecodeInputs& in, TensorView& out, int threads) {
  return absl::UnimplementedError("mla_decode is not implemented by the cpu backend yet");
}

}  // namespace cpu
}  // namespace kernelserve
