// What the sm_90a MoE GEMMs share: the two steps of the exact MXFP4 -> bf16
// dequantization (the E2M1 bits placed into bf16 bit fields with integer
// ops, and the exact bf16x2 multiply by a power of two that applies the E8M0
// block scale; mul.rn.bf16x2 is sm_90 PTX), and the launch over the
// routing's expert tiles.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM90_MOE_MOE_GEMM_COMMON_CUH_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM90_MOE_MOE_GEMM_COMMON_CUH_

#include <cstdint>

#include "kernels/gpu/common/gpu.h"
#include "kernels/gpu/moe/moe_params.h"

namespace kernelserve {
namespace gpu {
namespace moe {

// Two E2M1 nibbles (low byte of u) -> bf16x2 of value * 2^-126 (exact bit
// placement: exponent and mantissa bits land in bf16's, the one subnormal
// code becomes a bf16 subnormal).
__device__ __forceinline__ uint32_t Fp4PairBits(uint32_t u) {
  const uint32_t v = (u & 0xFFu) * 0x1001u;
  return ((v << 6) & 0x01C001C0u) | ((v << 12) & 0x80008000u);
}

__device__ __forceinline__ uint32_t MulBf16x2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// The E8M0 block scale sc as one or two exact bf16x2 multipliers of the
// placed bits (value * 2^-126): value * 2^(sc-1) in one multiply when
// 2^(sc-1) is a normal bf16, else two (2^126, then 2^(sc-127); sc = 0 is
// the subnormal 2^-127, sc = 255 NaN).
struct BlockScale {
  uint32_t f1, f2;
  bool one;
};

__device__ __forceinline__ BlockScale MakeBlockScale(uint32_t sc) {
  BlockScale s;
  s.one = sc >= 1 && sc <= 128;
  s.f1 = s.one ? ((sc + 126u) << 7) * 0x10001u : 0x7E807E80u;
  s.f2 = sc == 255 ? 0x7FC07FC0u : (sc == 0 ? 0x00400040u : (sc << 7) * 0x10001u);
  return s;
}

// One byte of E2M1 (the low byte of u: elements 2b, 2b + 1) as bf16x2 with
// its block scale applied, exactly.
__device__ __forceinline__ uint32_t DequantPair(uint32_t u, const BlockScale& s) {
  const uint32_t v = MulBf16x2(Fp4PairBits(u), s.f1);
  return s.one ? v : MulBf16x2(v, s.f2);
}

__device__ __forceinline__ uint32_t Prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

// Nibble kJ (0 or 1) of each 16-bit half of v -> bf16x2 of value *
// 2^-126: magnitude bits to bf16 bits 6..8, the sign to bit 15 (the bits of
// Fp4PairBits, for a nibble pair four apart). With only the two nibbles
// left, one integer multiply makes both copies (magnitude 6 - 4kJ bits up,
// sign 12 - 4kJ): they share no bit, so the product is their OR, and one
// mask keeps the fields. Three instructions per bf16x2 where a shift and a
// mask per field took four (the same bits for every input word).
template <int kJ>
__device__ __forceinline__ uint32_t PairBits(uint32_t v) {
  static_assert(kJ == 0 || kJ == 1, "nibble 0 or 1 of a byte");
  constexpr uint32_t kNibbles = 0x000F000Fu << (4 * kJ);
  constexpr uint32_t kCopies = (64u + 4096u) >> (4 * kJ);
  return ((v & kNibbles) * kCopies) & 0x81C081C0u;
}

// The one-multiply scale of a block known to need no second (MakeBlockScale's
// f1 when its `one` holds: sc in 1..128, so sc + 126 fits the exponent).
__device__ __forceinline__ BlockScale OneMultiplyScale(uint32_t sc) {
  BlockScale s;
  s.one = true;
  s.f1 = sc * 0x00800080u + 0x3F003F00u;  // ((sc + 126) << 7) in both halves
  s.f2 = 0x3F803F80u;
  return s;
}

// Byte `sel & 3` of w (PRMT selector 0x4440 + byte) as Fp4PairBits places
// it: spread so its two nibbles sit 16 bits apart, then PairBits<0>. Five
// instructions where the shifts and masks of Fp4PairBits take seven or more.
__device__ __forceinline__ uint32_t Fp4PairBitsOfByte(uint32_t w, uint32_t sel) {
  return PairBits<0>(Prmt(w, 0u, sel) * 0x1001u);
}

// Grid (col_tiles, max_tiles) of `kernel` with `smem` bytes of dynamic
// shared memory; CTAs past the routing's tile count return at once.
template <int kThreads>
cudaError_t LaunchOverTiles(void (*kernel)(GemmParams), const GemmParams& p, int64_t col_tiles, int64_t max_tiles,
                            int smem, cudaStream_t stream) {
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  kernel<<<dim3(static_cast<unsigned>(col_tiles), static_cast<unsigned>(max_tiles)), kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}
template <int kThreads, int kSmem>
cudaError_t LaunchOverTiles(void (*kernel)(GemmParams), const GemmParams& p, int64_t col_tiles, int64_t max_tiles,
                            cudaStream_t stream) {
  return LaunchOverTiles<kThreads>(kernel, p, col_tiles, max_tiles, kSmem, stream);
}

}  // namespace moe
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM90_MOE_MOE_GEMM_COMMON_CUH_
