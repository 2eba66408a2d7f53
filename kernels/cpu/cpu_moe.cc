#include "absl/status/status.h"
#include "kernels/cpu/cpu_kernels.h"

namespace kernelserve {
namespace cpu {

absl::Status Moe(const MoeParams& p, const MoeInputs& in, TensorView& out, int threads) {
  return absl::UnimplementedError("moe is not implemented by the cpu backend yet");
}

}  // namespace cpu
}  // namespace kernelserve
