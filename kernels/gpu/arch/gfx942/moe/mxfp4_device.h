// Device pieces the gfx942 MXFP4 MoE kernels share (moe_gemm_mxfp4.hip, the
// gate/up kernel that walks K in slabs; moe_down_mxfp4.hip, the down kernel
// that stages its whole A tile): the E2M1 x E8M0 decode into the MFMA's B
// operand, 16-byte global loads, and the per-pair epilogue.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_GFX942_MOE_MXFP4_DEVICE_H_
#define KERNELSERVE_KERNELS_GPU_ARCH_GFX942_MOE_MXFP4_DEVICE_H_

#include <cstdint>

#include "kernels/gpu/arch/gfx942/mfma.h"
#include "kernels/gpu/arch/gfx942/moe/moe_gfx942_launch.h"
#include "kernels/gpu/common/bf16.cuh"
#include "kernels/gpu/common/gpu.h"
#include "kernels/gpu/moe/moe_params.h"

namespace kernelserve {
namespace gpu {
namespace moe {
namespace gfx942 {

using gpu::gfx942::Bf16x4;
using gpu::gfx942::F32x4;

// E2M1 magnitude codes 0..7 as bf16: 0, 0.5, 1, 1.5, 2, 3, 4, 6.
__device__ __forceinline__ uint32_t E2m1Bf16(uint32_t code) {
  const uint32_t mag = code & 7u;
  // Exponent/mantissa of 0.5..6 follow the code: 1 + code/2 binades above 0.5, the low bit the mantissa.
  const uint32_t bits = mag == 0 ? 0u : mag == 1 ? 0x3F00u : (0x3F80u + ((mag - 2) >> 1 << 7) + ((mag & 1) << 6));
  return bits | ((code & 8u) << 12);
}

// 2^(e - 127) as fp32: e = 0 is the subnormal 2^-127, e = 255 NaN.
__device__ __forceinline__ float E8m0(uint32_t e) {
  return e == 0 ? __uint_as_float(0x00400000u) : e == 255 ? __uint_as_float(0x7FC00000u) : __uint_as_float(e << 23);
}

// Four E2M1 codes (two bytes, element 2i in the low nibble of byte i) scaled
// by `scale` -> the B operand's four bf16. Exact: an E2M1 value has two
// significant bits and a power-of-two scale keeps them, within bf16's
// exponent range.
__device__ __forceinline__ Bf16x4 DecodeFp4x4(uint32_t two_bytes, float scale) {
  Bf16x4 r;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float v = __uint_as_float(E2m1Bf16((two_bytes >> (4 * i)) & 0xFu) << 16) * scale;
    r[i] = static_cast<short>(__float_as_uint(v) >> 16);
  }
  return r;
}

typedef unsigned U32x4 __attribute__((ext_vector_type(4)));

// 16 bytes from global memory at p (16-byte aligned: device allocations and
// the offsets the kernels load at are). The address space is explicit: the
// A and weight pieces come from different pointers, and a select between
// them would otherwise leave a generic pointer and a flat load.
__device__ __forceinline__ U32x4 LoadGlobal16(const void* p) {
  typedef const __attribute__((address_space(1))) U32x4 GlobalU32x4;
  return *(GlobalU32x4*)p;  // NOLINT(readability/casting): an address-space cast has no C++ spelling
}

// An MFMA result at output column `col` (< out_cols): this lane holds the
// routing's sorted rows `first` + i (its tile's base, the MFMA tile's row in
// it, 4 (lane / 16)). Padding rows are skipped; fp32 as is, or bf16 (after
// SwiGLU with `acc_up` under that epilogue) rounded once in the call's mode.
template <int kEpi>
__device__ __forceinline__ void StorePairOutputs(const GemmParams& p, int first, int col, const F32x4& acc,
                                                 const F32x4& acc_up) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int out_pair = p.sorted[first + i];
    if (out_pair < 0) continue;
    const int64_t at = static_cast<int64_t>(out_pair) * p.out_cols + col;
    if (kEpi == kEpiF32) {
      static_cast<float*>(p.out)[at] = acc[i];
    } else {
      float v = acc[i];
      if (kEpi == kEpiSwiglu) v = v / (1.f + Exp2Approx(-v * 1.4426950408889634f)) * acc_up[i];
      static_cast<uint16_t*>(p.out)[at] = static_cast<uint16_t>(FloatToBf16Bits(v, p.rounding));
    }
  }
}

}  // namespace gfx942
}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_GFX942_MOE_MXFP4_DEVICE_H_
