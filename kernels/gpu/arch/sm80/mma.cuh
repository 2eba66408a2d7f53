// The sm_80+ warp-level instructions of the mma.sync kernels (built for
// sm_90a here): cp.async (global -> shared, zero-filled out of bounds),
// ldmatrix, mma.sync m16n8k16 bf16 and m16n8k32 e4m3 (sm_89+) with fp32
// accumulation, and the packed conversions feeding them and from fp32 to
// e4m3fn (sm_89+). One copy each.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM80_MMA_CUH_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM80_MMA_CUH_

#include <cstdint>

namespace kernelserve {
namespace gpu {
namespace sm80 {

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte async copy; src_bytes < 16 zero-fills the rest (0: reads nothing).
__device__ __forceinline__ void CpAsync16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
// The same with a 256-byte L2 prefetch: for a row read 16 or 32 bytes per
// k-tile, the next k-tiles' bytes arrive in L2 with this one (DRAM sees
// 256-byte bursts instead of 32-byte sectors).
__device__ __forceinline__ void CpAsync16Prefetch256(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
// 4-byte async copy (.ca: cp.async.cg takes 16 bytes only); src_bytes 0 zero-fills.
__device__ __forceinline__ void CpAsync4(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void LdMatrixX4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2,
                                                uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
__device__ __forceinline__ void LdMatrixX4(uint32_t addr, uint32_t (&r)[4]) { LdMatrixX4(addr, r[0], r[1], r[2], r[3]); }
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t addr, uint32_t (&r)[4]) {
  LdMatrixX4Trans(addr, r[0], r[1], r[2], r[3]);
}

// D += A(16x16 bf16, row) * B(16x8 bf16, col), fp32 accumulators.
__device__ __forceinline__ void MmaBf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                        uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void MmaBf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  MmaBf16(d, a[0], a[1], a[2], a[3], b0, b1);
}

// D += A(16x32 e4m3, row) * B(32x8 e4m3, col), fp32 accumulators (sm_89+).
__device__ __forceinline__ void MmaE4m3(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                        uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Two floats -> bf16x2 (lo in the low half), round to nearest even, no NaN
// canonicalization: for operands of the tensor cores.
__device__ __forceinline__ uint32_t PackBf16x2Rn(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// Two floats -> two e4m3fn codes, lo in bits 0-7 and hi in bits 8-15, round
// to nearest even, saturating to +-448 (sm_89+); the codes of
// common/fp8_encode.h's FloatToE4m3fn.
__device__ __forceinline__ uint32_t F32x2ToE4m3fnX2(float lo, float hi) {
  uint16_t c;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(c) : "f"(hi), "f"(lo));
  return c;
}

// Two e4m3fn codes (low two bytes of v) -> two floats, exact (through f16; sm_89+).
__device__ __forceinline__ void E4m3fnX2ToF32x2(uint32_t v, float& lo, float& hi) {
  uint32_t h;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h) : "h"(static_cast<uint16_t>(v)));
  asm("{.reg .f16 l, h;\n mov.b32 {l, h}, %2;\n cvt.f32.f16 %0, l;\n cvt.f32.f16 %1, h;}\n"
      : "=f"(lo), "=f"(hi)
      : "r"(h));
}

// Two e4m3fn codes (low two bytes of v) -> bf16x2, exact.
__device__ __forceinline__ uint32_t E4m3fnX2ToBf16x2(uint32_t v) {
  float lo, hi;
  E4m3fnX2ToF32x2(v, lo, hi);
  return PackBf16x2Rn(lo, hi);
}

}  // namespace sm80
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM80_MMA_CUH_
