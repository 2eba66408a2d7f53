// sm_90a fp8 (e4m3) warpgroup MMA wrappers (QGMMA) for the FP8 attention
// kernel: m64nNk32, fp32 accumulators in the layout of wgmma.h (per warp that
// of mma.sync m16n8). fp8 wgmma takes no transpose flags, so B (and A from
// shared memory) must be K-major; the descriptors, fences and operand pins
// are wgmma.h's: a k32 step of e4m3 spans 32 bytes, as a k16 step of bf16,
// so the 128-byte-swizzle descriptor arithmetic is the same.
#ifndef KERNELSERVE_KERNELS_CUDA_FP8_ATTENTION_WGMMA_FP8_H_
#define KERNELSERVE_KERNELS_CUDA_FP8_ATTENTION_WGMMA_FP8_H_

#include <cstdint>

#include "kernels/cuda/attention/sm90/wgmma.h"

namespace kernelserve {
namespace cuda_fp8 {

// d (+)= A * B, A [64 x 32] and B [32 x 128] e4m3 from shared memory, both
// K-major (fp8 wgmma has no transpose). scale_d = 0 overwrites d.
__device__ __forceinline__ void WgmmaSS_m64n128k32_e4m3(float (&d)[16][4], uint64_t desc_a,
                                                    uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1;\n}\n"
      : "+f"(d[0][0]),
        "+f"(d[0][1]),
        "+f"(d[0][2]),
        "+f"(d[0][3]),
        "+f"(d[1][0]),
        "+f"(d[1][1]),
        "+f"(d[1][2]),
        "+f"(d[1][3]),
        "+f"(d[2][0]),
        "+f"(d[2][1]),
        "+f"(d[2][2]),
        "+f"(d[2][3]),
        "+f"(d[3][0]),
        "+f"(d[3][1]),
        "+f"(d[3][2]),
        "+f"(d[3][3]),
        "+f"(d[4][0]),
        "+f"(d[4][1]),
        "+f"(d[4][2]),
        "+f"(d[4][3]),
        "+f"(d[5][0]),
        "+f"(d[5][1]),
        "+f"(d[5][2]),
        "+f"(d[5][3]),
        "+f"(d[6][0]),
        "+f"(d[6][1]),
        "+f"(d[6][2]),
        "+f"(d[6][3]),
        "+f"(d[7][0]),
        "+f"(d[7][1]),
        "+f"(d[7][2]),
        "+f"(d[7][3]),
        "+f"(d[8][0]),
        "+f"(d[8][1]),
        "+f"(d[8][2]),
        "+f"(d[8][3]),
        "+f"(d[9][0]),
        "+f"(d[9][1]),
        "+f"(d[9][2]),
        "+f"(d[9][3]),
        "+f"(d[10][0]),
        "+f"(d[10][1]),
        "+f"(d[10][2]),
        "+f"(d[10][3]),
        "+f"(d[11][0]),
        "+f"(d[11][1]),
        "+f"(d[11][2]),
        "+f"(d[11][3]),
        "+f"(d[12][0]),
        "+f"(d[12][1]),
        "+f"(d[12][2]),
        "+f"(d[12][3]),
        "+f"(d[13][0]),
        "+f"(d[13][1]),
        "+f"(d[13][2]),
        "+f"(d[13][3]),
        "+f"(d[14][0]),
        "+f"(d[14][1]),
        "+f"(d[14][2]),
        "+f"(d[14][3]),
        "+f"(d[15][0]),
        "+f"(d[15][1]),
        "+f"(d[15][2]),
        "+f"(d[15][3])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// d (+)= A * B, A [64 x 32] e4m3 from registers (per warp the mma.sync
// m16n8k32 A-fragment layout), B [32 x 136] e4m3 K-major in shared memory.
__device__ __forceinline__ void WgmmaRS_m64n136k32_e4m3(float (&d)[17][4], const uint32_t (&a)[4],
                                                    uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %73, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n136k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67}, {%68, %69, %70, %71}, %72, p, 1, 1;\n}\n"
      : "+f"(d[0][0]),
        "+f"(d[0][1]),
        "+f"(d[0][2]),
        "+f"(d[0][3]),
        "+f"(d[1][0]),
        "+f"(d[1][1]),
        "+f"(d[1][2]),
        "+f"(d[1][3]),
        "+f"(d[2][0]),
        "+f"(d[2][1]),
        "+f"(d[2][2]),
        "+f"(d[2][3]),
        "+f"(d[3][0]),
        "+f"(d[3][1]),
        "+f"(d[3][2]),
        "+f"(d[3][3]),
        "+f"(d[4][0]),
        "+f"(d[4][1]),
        "+f"(d[4][2]),
        "+f"(d[4][3]),
        "+f"(d[5][0]),
        "+f"(d[5][1]),
        "+f"(d[5][2]),
        "+f"(d[5][3]),
        "+f"(d[6][0]),
        "+f"(d[6][1]),
        "+f"(d[6][2]),
        "+f"(d[6][3]),
        "+f"(d[7][0]),
        "+f"(d[7][1]),
        "+f"(d[7][2]),
        "+f"(d[7][3]),
        "+f"(d[8][0]),
        "+f"(d[8][1]),
        "+f"(d[8][2]),
        "+f"(d[8][3]),
        "+f"(d[9][0]),
        "+f"(d[9][1]),
        "+f"(d[9][2]),
        "+f"(d[9][3]),
        "+f"(d[10][0]),
        "+f"(d[10][1]),
        "+f"(d[10][2]),
        "+f"(d[10][3]),
        "+f"(d[11][0]),
        "+f"(d[11][1]),
        "+f"(d[11][2]),
        "+f"(d[11][3]),
        "+f"(d[12][0]),
        "+f"(d[12][1]),
        "+f"(d[12][2]),
        "+f"(d[12][3]),
        "+f"(d[13][0]),
        "+f"(d[13][1]),
        "+f"(d[13][2]),
        "+f"(d[13][3]),
        "+f"(d[14][0]),
        "+f"(d[14][1]),
        "+f"(d[14][2]),
        "+f"(d[14][3]),
        "+f"(d[15][0]),
        "+f"(d[15][1]),
        "+f"(d[15][2]),
        "+f"(d[15][3]),
        "+f"(d[16][0]),
        "+f"(d[16][1]),
        "+f"(d[16][2]),
        "+f"(d[16][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
}

}  // namespace cuda_fp8
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_CUDA_FP8_ATTENTION_WGMMA_FP8_H_
