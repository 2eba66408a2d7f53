// sm_90a warpgroup MMA (wgmma) wrappers and shared-memory matrix
// descriptors for the Hopper attention kernel. All operands bf16, fp32
// accumulators in the m64nNk16 layout: thread (warp w of the warpgroup, lane
// g*4+t) holds d[j][0..3] = rows 16w+g (0,1) and 16w+g+8 (2,3), columns 8j+2t
// and 8j+2t+1, the same per-warp layout as mma.sync m16n8.
#ifndef KERNELSERVE_KERNELS_CUDA_ATTENTION_SM90_WGMMA_H_
#define KERNELSERVE_KERNELS_CUDA_ATTENTION_SM90_WGMMA_H_

#include <cstdint>

namespace kernelserve {
namespace cuda {
namespace sm90 {

// Descriptor of a 128-byte-swizzled operand (rows of 64 bf16 = 128 bytes,
// 16-byte chunk c of row r stored at chunk c ^ (r & 7), 8-row atoms 1024-byte
// aligned). lbo/sbo in bytes: for K-major operands sbo is the distance between
// 8-row groups (1024) and lbo is unused; for MN-major (transposed) operands
// lbo is the distance between 64-element column blocks and sbo between
// 8-row (K) groups.
__device__ __forceinline__ uint64_t MakeSmemDesc(uint32_t smem_addr, uint32_t lbo_bytes,
                                                 uint32_t sbo_bytes) {
  uint64_t d = 0;
  d |= static_cast<uint64_t>((smem_addr & 0x3FFFF) >> 4);
  d |= static_cast<uint64_t>((lbo_bytes >> 4) & 0x3FFF) << 16;
  d |= static_cast<uint64_t>((sbo_bytes >> 4) & 0x3FFF) << 32;
  d |= static_cast<uint64_t>(1) << 62;  // 128-byte swizzle
  return d;
}

__device__ __forceinline__ void WgmmaFence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void WgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Orders this thread's generic-proxy shared-memory writes (cp.async, st.shared)
// before later async-proxy reads (wgmma) once a barrier follows.
__device__ __forceinline__ void FenceProxyAsync() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Pins registers in place around wgmma fences and waits: the compiler may
// not move their writes past a fence nor their reads above a wait.
template <int N>
__device__ __forceinline__ void FenceOperand(float (&d)[N][4]) {
#pragma unroll
  for (int j = 0; j < N; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[j][e])::"memory");
  }
}
template <int N>
__device__ __forceinline__ void FenceOperand(uint32_t (&a)[N][4]) {
#pragma unroll
  for (int j = 0; j < N; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(a[j][e])::"memory");
  }
}

// d (+)= A * B, A [64 x 16] and B [16 x 128] both from shared memory, both
// K-major. scale_d = 0 overwrites d.
__device__ __forceinline__ void WgmmaSS_m64n128k16(float (&d)[16][4], uint64_t desc_a,
                                                   uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
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

// As above with N = 64 (d has 8 column tiles of 8).
__device__ __forceinline__ void WgmmaSS_m64n64k16(float (&d)[8][4], uint64_t desc_a,
                                                  uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
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
        "+f"(d[7][3])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// S = Q K^T step for a key tile of N columns.
template <int N>
__device__ __forceinline__ void WgmmaSS(float (&d)[N / 8][4], uint64_t desc_a, uint64_t desc_b,
                                        int scale_d) {
  if constexpr (N == 128) {
    WgmmaSS_m64n128k16(d, desc_a, desc_b, scale_d);
  } else {
    static_assert(N == 64, "key tiles of 64 or 128");
    WgmmaSS_m64n64k16(d, desc_a, desc_b, scale_d);
  }
}

// d (+)= A * B, A [64 x 16] from registers (mma.sync A-fragment layout per
// warp), B from shared memory stored MN-major (transposed: B's N index runs
// along the 128-byte rows).
__device__ __forceinline__ void WgmmaRS_m64n128k16_TransB(float (&d)[16][4],
                                                          const uint32_t (&a)[4],
                                                          uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
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
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
}

}  // namespace sm90
}  // namespace cuda
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_CUDA_ATTENTION_SM90_WGMMA_H_
