// sm_90a warpgroup MMA (wgmma): the one copy of its PTX wrappers, shared-memory
// matrix descriptors and fences for every Hopper kernel.
//
// D[64 x N] (+)= A[64 x K] * B[K x N], fp32 accumulators. K is 16 for bf16
// and f16 operands, 32 for e4m3. A thread holds N/2 accumulators in the
// m64nN layout: thread (warp w of the warpgroup, lane 4g+t) holds, for
// column tile j (8 columns), d[4j..4j+3] = rows 16w+g (0, 1) and 16w+g+8
// (2, 3), columns 8j+2t and 8j+2t+1: per warp the layout of mma.sync m16n8.
// Kernels that index column tiles pass float[N/8][4], the same registers.
//
// WgmmaSS reads A and B from shared memory by descriptor, WgmmaRS takes A
// from registers (per warp the mma.sync A-fragment layout). kTransB: B is
// stored MN-major (its N index along the 128-byte rows); e4m3 has no
// transposed form, so its B (and A from shared memory) must be K-major.
// scale_d = 0 overwrites d instead of accumulating.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM90_WGMMA_CUH_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM90_WGMMA_CUH_

#include <cstdint>
#include <type_traits>

namespace kernelserve {
namespace gpu {
namespace sm90 {

// Operand element types.
struct Bf16 {};
struct F16 {};
struct E4m3 {};

// ------------------------------------------------------------ descriptors
// A descriptor's address, leading (lbo) and stride (sbo) byte offsets are
// stored in 16-byte units. Interleaved (no swizzle): 8x16-byte core matrices
// stored as 128 contiguous bytes; lbo is the stride between core matrices
// along K, sbo along M/N.
__device__ __forceinline__ uint64_t MakeSmemDescInterleave(uint32_t smem_addr, uint32_t lbo_bytes,
                                                           uint32_t sbo_bytes) {
  return static_cast<uint64_t>((smem_addr >> 4) & 0x3FFF) |
         (static_cast<uint64_t>((lbo_bytes >> 4) & 0x3FFF) << 16) |
         (static_cast<uint64_t>((sbo_bytes >> 4) & 0x3FFF) << 32);
}
// 128-byte swizzle: rows of 128 bytes whose 16-byte chunk c sits at chunk
// c ^ (row & 7), 8-row atoms 1024-byte aligned. K-major: sbo is the stride
// of 8-row groups (1024 for dense rows) and lbo unused; MN-major: lbo is the
// stride of 64-element blocks along MN, sbo of 8-row groups along K.
__device__ __forceinline__ uint64_t MakeSmemDesc(uint32_t smem_addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  return MakeSmemDescInterleave(smem_addr, lbo_bytes, sbo_bytes) | (static_cast<uint64_t>(1) << 62);
}
// 64-byte swizzle: rows of 64 bytes whose 16-byte chunk c sits at chunk
// c ^ ((row >> 1) & 3), 8-row atoms of 512 bytes, 512-byte aligned (TMA's
// CU_TENSOR_MAP_SWIZZLE_64B); K-major sbo is 512 for dense rows. It holds
// the 64-byte tail of a row that a 128-byte swizzle row cannot (d_qk = 192
// e4m3 = 128 + 64 bytes).
__device__ __forceinline__ uint64_t MakeSmemDesc64B(uint32_t smem_addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  return MakeSmemDescInterleave(smem_addr, lbo_bytes, sbo_bytes) | (static_cast<uint64_t>(2) << 62);
}

// A descriptor moved by `bytes` (a multiple of 16): the start address field
// holds address >> 4 in 14 bits and shared memory lies below 256 KB, so the
// add never carries out of the field. Kernels make the descriptor of a
// tile's first byte once and move it per wgmma: one add, where building the
// descriptor from the address is about five uniform-datapath operations.
__device__ __forceinline__ uint64_t DescPlus(uint64_t desc, uint32_t bytes) { return desc + (bytes >> 4); }

// ----------------------------------------------------------------- fences
__device__ __forceinline__ void WgmmaFence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void WgmmaCommit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Orders this thread's generic-proxy shared-memory writes (cp.async,
// st.shared) before later async-proxy reads (wgmma, TMA stores) once a
// barrier follows.
__device__ __forceinline__ void FenceProxyAsync() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Pins registers in place around wgmma fences and waits: the compiler may
// not move their writes past a fence nor their reads above a wait (which
// ptxas otherwise answers by serializing the wgmmas, C7514).
__device__ __forceinline__ void FenceOperand(float& r) { asm volatile("" : "+f"(r)::"memory"); }
template <int N>
__device__ __forceinline__ void FenceOperand(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
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

// ------------------------------------------------------------------- MMA
// The accumulator operand lists: "%0, ..., %(n-1)" and "+f"(d[0]), ...
#define KS_WGMMA_R0 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define KS_WGMMA_R16 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define KS_WGMMA_R32 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47"
#define KS_WGMMA_R48 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define KS_WGMMA_R64 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79"
#define KS_WGMMA_R80 "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define KS_WGMMA_R96 "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111"
#define KS_WGMMA_R112 \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define KS_WGMMA_REGS_8 "%0, %1, %2, %3, %4, %5, %6, %7"
#define KS_WGMMA_REGS_16 KS_WGMMA_R0
#define KS_WGMMA_REGS_32 KS_WGMMA_R0 ", " KS_WGMMA_R16
#define KS_WGMMA_REGS_48 KS_WGMMA_REGS_32 ", " KS_WGMMA_R32
#define KS_WGMMA_REGS_64 KS_WGMMA_REGS_32 ", " KS_WGMMA_R32 ", " KS_WGMMA_R48
#define KS_WGMMA_REGS_68 KS_WGMMA_REGS_64 ", %64, %65, %66, %67"
#define KS_WGMMA_REGS_80 KS_WGMMA_REGS_64 ", " KS_WGMMA_R64
#define KS_WGMMA_REGS_88 KS_WGMMA_REGS_80 ", %80, %81, %82, %83, %84, %85, %86, %87"
#define KS_WGMMA_REGS_96 KS_WGMMA_REGS_64 ", " KS_WGMMA_R64 ", " KS_WGMMA_R80
#define KS_WGMMA_REGS_128 KS_WGMMA_REGS_96 ", " KS_WGMMA_R96 ", " KS_WGMMA_R112

#define KS_WGMMA_D4(i) "+f"(d[(i)]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3])
#define KS_WGMMA_D16(i) KS_WGMMA_D4(i), KS_WGMMA_D4((i) + 4), KS_WGMMA_D4((i) + 8), KS_WGMMA_D4((i) + 12)
#define KS_WGMMA_D32(i) KS_WGMMA_D16(i), KS_WGMMA_D16((i) + 16)
#define KS_WGMMA_D64(i) KS_WGMMA_D32(i), KS_WGMMA_D32((i) + 32)
#define KS_WGMMA_OUT_8 KS_WGMMA_D4(0), KS_WGMMA_D4(4)
#define KS_WGMMA_OUT_16 KS_WGMMA_D16(0)
#define KS_WGMMA_OUT_32 KS_WGMMA_D32(0)
#define KS_WGMMA_OUT_48 KS_WGMMA_D32(0), KS_WGMMA_D16(32)
#define KS_WGMMA_OUT_64 KS_WGMMA_D64(0)
#define KS_WGMMA_OUT_68 KS_WGMMA_D64(0), KS_WGMMA_D4(64)
#define KS_WGMMA_OUT_80 KS_WGMMA_D64(0), KS_WGMMA_D16(64)
#define KS_WGMMA_OUT_88 KS_WGMMA_D64(0), KS_WGMMA_D16(64), KS_WGMMA_D4(80), KS_WGMMA_D4(84)
#define KS_WGMMA_OUT_96 KS_WGMMA_D64(0), KS_WGMMA_D32(64)
#define KS_WGMMA_OUT_128 KS_WGMMA_D64(0), KS_WGMMA_D64(64)

// One instruction. NREG accumulators are operands 0..NREG-1; the numbers
// after them are spelled out (the preprocessor cannot add): SS takes desc_a
// (IA), desc_b (IB), scale_d (IP); RS the four A registers (A0), desc_b (IB),
// scale_d (IP). TRANS: the immediates after scale-a and scale-b.
#define KS_WGMMA_SS(SHAPE_TYPES, NREG, IA, IB, IP, TRANS)                                                    \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #IP ", 0;\n"                                          \
               "wgmma.mma_async.sync.aligned." SHAPE_TYPES " {" KS_WGMMA_REGS_##NREG "}, %" #IA ", %" #IB \
               ", p, 1, 1" TRANS ";\n}\n"                                                                   \
               : KS_WGMMA_OUT_##NREG                                                                        \
               : "l"(desc_a), "l"(desc_b), "r"(scale_d))
#define KS_WGMMA_RS(SHAPE_TYPES, NREG, A0, A1, A2, A3, IB, IP, TRANS)                                       \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #IP ", 0;\n"                                          \
               "wgmma.mma_async.sync.aligned." SHAPE_TYPES " {" KS_WGMMA_REGS_##NREG "}, {%" #A0 ", %" #A1 \
               ", %" #A2 ", %" #A3 "}, %" #IB ", p, 1, 1" TRANS ";\n}\n"                                  \
               : KS_WGMMA_OUT_##NREG                                                                        \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d))

template <class>
inline constexpr bool kNoSuchWgmma = false;

// The shapes and types the kernels use; another is one more line here.
template <int kN, class T, bool kTransB = false>
__device__ __forceinline__ void WgmmaSS(float (&d)[kN / 2], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  constexpr bool bf16 = std::is_same_v<T, Bf16>;
  if constexpr (bf16 && kN == 32 && !kTransB) {
    KS_WGMMA_SS("m64n32k16.f32.bf16.bf16", 16, 16, 17, 18, ", 0, 0");
  } else if constexpr (bf16 && kN == 64 && !kTransB) {
    KS_WGMMA_SS("m64n64k16.f32.bf16.bf16", 32, 32, 33, 34, ", 0, 0");
  } else if constexpr (bf16 && kN == 128 && !kTransB) {
    KS_WGMMA_SS("m64n128k16.f32.bf16.bf16", 64, 64, 65, 66, ", 0, 0");
  } else if constexpr (bf16 && kN == 176 && !kTransB) {
    KS_WGMMA_SS("m64n176k16.f32.bf16.bf16", 88, 88, 89, 90, ", 0, 0");
  } else if constexpr (bf16 && kN == 192 && !kTransB) {
    KS_WGMMA_SS("m64n192k16.f32.bf16.bf16", 96, 96, 97, 98, ", 0, 0");
  } else if constexpr (bf16 && kN == 256 && !kTransB) {
    KS_WGMMA_SS("m64n256k16.f32.bf16.bf16", 128, 128, 129, 130, ", 0, 0");
  } else if constexpr (bf16 && kN == 256 && kTransB) {
    KS_WGMMA_SS("m64n256k16.f32.bf16.bf16", 128, 128, 129, 130, ", 0, 1");
  } else if constexpr (std::is_same_v<T, E4m3> && kN == 128 && !kTransB) {
    KS_WGMMA_SS("m64n128k32.f32.e4m3.e4m3", 64, 64, 65, 66, "");
  } else {
    static_assert(kNoSuchWgmma<T>, "no wrapper for this wgmma shape: add one line above");
  }
}

template <int kN, class T, bool kTransB = false>
__device__ __forceinline__ void WgmmaRS(float (&d)[kN / 2], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
  if constexpr (std::is_same_v<T, F16> && kN == 64) {
    if constexpr (kTransB) {
      KS_WGMMA_RS("m64n64k16.f32.f16.f16", 32, 32, 33, 34, 35, 36, 37, ", 1");
    } else {
      KS_WGMMA_RS("m64n64k16.f32.f16.f16", 32, 32, 33, 34, 35, 36, 37, ", 0");
    }
  } else if constexpr (std::is_same_v<T, F16> && kN == 32) {
    if constexpr (kTransB) {
      KS_WGMMA_RS("m64n32k16.f32.f16.f16", 16, 16, 17, 18, 19, 20, 21, ", 1");
    } else {
      KS_WGMMA_RS("m64n32k16.f32.f16.f16", 16, 16, 17, 18, 19, 20, 21, ", 0");
    }
  } else if constexpr (std::is_same_v<T, F16> && kN == 16) {
    if constexpr (kTransB) {
      KS_WGMMA_RS("m64n16k16.f32.f16.f16", 8, 8, 9, 10, 11, 12, 13, ", 1");
    } else {
      KS_WGMMA_RS("m64n16k16.f32.f16.f16", 8, 8, 9, 10, 11, 12, 13, ", 0");
    }
  } else if constexpr (std::is_same_v<T, Bf16> && !kTransB && kN == 32) {
    KS_WGMMA_RS("m64n32k16.f32.bf16.bf16", 16, 16, 17, 18, 19, 20, 21, ", 0");
  } else if constexpr (std::is_same_v<T, Bf16> && !kTransB && kN == 64) {
    KS_WGMMA_RS("m64n64k16.f32.bf16.bf16", 32, 32, 33, 34, 35, 36, 37, ", 0");
  } else if constexpr (std::is_same_v<T, Bf16> && !kTransB && kN == 96) {
    KS_WGMMA_RS("m64n96k16.f32.bf16.bf16", 48, 48, 49, 50, 51, 52, 53, ", 0");
  } else if constexpr (std::is_same_v<T, Bf16> && !kTransB && kN == 128) {
    KS_WGMMA_RS("m64n128k16.f32.bf16.bf16", 64, 64, 65, 66, 67, 68, 69, ", 0");
  } else if constexpr (std::is_same_v<T, Bf16> && !kTransB && kN == 160) {
    KS_WGMMA_RS("m64n160k16.f32.bf16.bf16", 80, 80, 81, 82, 83, 84, 85, ", 0");
  } else if constexpr (std::is_same_v<T, Bf16> && !kTransB && kN == 192) {
    KS_WGMMA_RS("m64n192k16.f32.bf16.bf16", 96, 96, 97, 98, 99, 100, 101, ", 0");
  } else if constexpr (std::is_same_v<T, Bf16> && kN == 64 && kTransB) {
    KS_WGMMA_RS("m64n64k16.f32.bf16.bf16", 32, 32, 33, 34, 35, 36, 37, ", 1");
  } else if constexpr (std::is_same_v<T, Bf16> && kN == 128 && kTransB) {
    KS_WGMMA_RS("m64n128k16.f32.bf16.bf16", 64, 64, 65, 66, 67, 68, 69, ", 1");
  } else if constexpr (std::is_same_v<T, Bf16> && kN == 256 && kTransB) {
    KS_WGMMA_RS("m64n256k16.f32.bf16.bf16", 128, 128, 129, 130, 131, 132, 133, ", 1");
  } else if constexpr (std::is_same_v<T, E4m3> && kN == 136 && !kTransB) {
    KS_WGMMA_RS("m64n136k32.f32.e4m3.e4m3", 68, 68, 69, 70, 71, 72, 73, "");
  } else {
    static_assert(kNoSuchWgmma<T>, "no wrapper for this wgmma shape: add one line above");
  }
}

// The same for accumulators held as column tiles.
template <int kN, class T, bool kTransB = false>
__device__ __forceinline__ void WgmmaSS(float (&d)[kN / 8][4], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  WgmmaSS<kN, T, kTransB>(reinterpret_cast<float(&)[kN / 2]>(d), desc_a, desc_b, scale_d);
}
template <int kN, class T, bool kTransB = false>
__device__ __forceinline__ void WgmmaRS(float (&d)[kN / 8][4], const uint32_t (&a)[4], uint64_t desc_b,
                                        int scale_d) {
  WgmmaRS<kN, T, kTransB>(reinterpret_cast<float(&)[kN / 2]>(d), a, desc_b, scale_d);
}

#undef KS_WGMMA_SS
#undef KS_WGMMA_RS
#undef KS_WGMMA_OUT_128
#undef KS_WGMMA_OUT_96
#undef KS_WGMMA_OUT_88
#undef KS_WGMMA_OUT_80
#undef KS_WGMMA_OUT_68
#undef KS_WGMMA_OUT_64
#undef KS_WGMMA_OUT_48
#undef KS_WGMMA_OUT_32
#undef KS_WGMMA_OUT_16
#undef KS_WGMMA_D64
#undef KS_WGMMA_D32
#undef KS_WGMMA_D16
#undef KS_WGMMA_D4
#undef KS_WGMMA_REGS_128
#undef KS_WGMMA_REGS_96
#undef KS_WGMMA_REGS_88
#undef KS_WGMMA_REGS_80
#undef KS_WGMMA_REGS_68
#undef KS_WGMMA_REGS_64
#undef KS_WGMMA_REGS_48
#undef KS_WGMMA_REGS_32
#undef KS_WGMMA_REGS_16
#undef KS_WGMMA_R112
#undef KS_WGMMA_R96
#undef KS_WGMMA_R80
#undef KS_WGMMA_R64
#undef KS_WGMMA_R48
#undef KS_WGMMA_R32
#undef KS_WGMMA_R16
#undef KS_WGMMA_R0

// ------------------------------------------------------------ epilogue
// A warp's accumulators packed to b16 pairs are, 8 x 8 block by block, the
// fragment layout of stmatrix (thread 4g+t holds row g, columns 2t and
// 2t+1). StMatrixX4Trans writes four such blocks transposed: lanes 8m..8m+7
// give the 16-byte-aligned addresses of block m's memory rows, and memory
// row r of block m receives the block's column r (its 8 rows, 16 bytes).
// One instruction per 256 elements where two-byte stores take eight.
__device__ __forceinline__ void StMatrixX4Trans(uint32_t smem_addr, uint32_t r0, uint32_t r1, uint32_t r2,
                                                uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_addr),
               "r"(r0), "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

}  // namespace sm90
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM90_WGMMA_CUH_
