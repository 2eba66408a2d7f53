// The normalization 1/sqrt(n) of the Hadamard rotations of Q and K (n = 128
// and 64), the double that 1.0 / sqrt(double(n)) gives, as numerics::Hadamard
// computes it: a constant here, because the AMD build has no math library
// (hadamard_scale_test.cc checks the values on the CPU).
#ifndef KERNELSERVE_KERNELS_GPU_FP8_ATTENTION_HADAMARD_SCALE_H_
#define KERNELSERVE_KERNELS_GPU_FP8_ATTENTION_HADAMARD_SCALE_H_

namespace kernelserve {
namespace gpu {
namespace fp8_attention {

template <int kN>
struct HadamardScale;
template <>
struct HadamardScale<128> {
  static constexpr double kValue = 0x1.6a09e667f3bccp-4;
};
template <>
struct HadamardScale<64> {
  static constexpr double kValue = 0.125;
};

}  // namespace fp8_attention
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_FP8_ATTENTION_HADAMARD_SCALE_H_
