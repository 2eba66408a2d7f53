#include "kernels/gpu/fp8_attention/hadamard_scale.h"

#include <cmath>

#include "gtest/gtest.h"

namespace kernelserve {
namespace gpu {
namespace fp8_attention {
namespace {

// Bit for bit the value the oracle's rotation multiplies by.
TEST(HadamardScaleTest, IsOneOverSqrtNInDouble) {
  volatile double n128 = 128, n64 = 64;  // computed at run time, not folded
  EXPECT_EQ(HadamardScale<128>::kValue, 1.0 / std::sqrt(n128));
  EXPECT_EQ(HadamardScale<64>::kValue, 1.0 / std::sqrt(n64));
}

}  // namespace
}  // namespace fp8_attention
}  // namespace gpu
}  // namespace kernelserve
