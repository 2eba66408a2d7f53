// What the quantization kernels (fp8_quantize.cu) take, and their grids:
// plain data without a vendor header, so that host code of any vendor
// (the CUDA entry, the HIP backend's launches by name) fills the same struct.
#ifndef KERNELSERVE_KERNELS_GPU_FP8_ATTENTION_FP8_QUANTIZE_ARGS_H_
#define KERNELSERVE_KERNELS_GPU_FP8_ATTENTION_FP8_QUANTIZE_ARGS_H_

#include <algorithm>
#include <cstdint>

namespace kernelserve {
namespace gpu {
namespace fp8_attention {

struct QuantizeArgs {
  const uint16_t* x = nullptr;  // bf16 rows of `dim` elements
  int64_t rows = 0;             // batch * heads * seq
  int dim = 0;                  // 64, 128 or 192
  bool hadamard = false;
  bool per_head = false;
  bool bshd = false;
  // Codes in e4m3fnuz (max 240) rather than e4m3fn (max 448): the AMD path.
  bool fnuz = false;
  int heads = 0, seq = 0;       // to map a row to its (batch, head)
  int batch = 0;
  uint8_t* codes = nullptr;     // same layout as x
  float* descale = nullptr;     // [batch*heads] (written expanded even per tensor)
  // Scratch: fp32 rotated rows (rows*dim, hadamard only) and amax bits ([batch*heads]).
  float* rotated = nullptr;
  unsigned int* amax = nullptr;
};

// The three passes' grids, of kQuantizeThreads each (the kernels loop over
// what a grid does not cover, so the caps only bound the launch).
constexpr int kQuantizeThreads = 256;
struct QuantizeGrids {
  int amax = 0, quantize = 0, descale = 0;
};
inline QuantizeGrids QuantizeGridsOf(const QuantizeArgs& a) {
  QuantizeGrids g;
  g.amax = static_cast<int>(std::min<int64_t>((a.rows + 7) / 8, 132 * 16));  // 8 rows of 32 lanes per block
  g.quantize = static_cast<int>(std::min<int64_t>((a.rows * a.dim + 255) / 256, 132 * 32));
  g.descale = (a.batch * a.heads + 255) / 256;
  return g;
}

}  // namespace fp8_attention
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_FP8_ATTENTION_FP8_QUANTIZE_ARGS_H_
