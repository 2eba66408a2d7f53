// The CUDA side of the vendor layer (gpu.h includes it; nothing else does).
// GPU code in this tree is written against the CUDA runtime's names and
// CUDA's device built-ins; hip.h maps those names to HIP's, as ggml's
// vendors/hip.h does, so a HIP build compiles the same code again.
#ifndef KERNELSERVE_KERNELS_GPU_COMMON_VENDORS_CUDA_H_
#define KERNELSERVE_KERNELS_GPU_COMMON_VENDORS_CUDA_H_

#include <cstdint>

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#else
#include <cuda_runtime_api.h>
#endif

#define KS_GPU_VENDOR "cuda"  // the backend's name
#define KS_GPU_VENDOR_NAME "CUDA"  // in messages
#define KS_GPU_CREATE_BACKEND CreateCudaBackend
// Sticky faults only CUDA has (gpu_status.cc), each followed by a comma.
#define KS_GPU_VENDOR_STICKY_ERRORS cudaErrorContained, cudaErrorTensorMemoryLeak,

#if defined(__CUDACC__)
namespace kernelserve {
namespace gpu {

constexpr int kWarpSize = 32;

__device__ __forceinline__ float ShflXor(float v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
__device__ __forceinline__ double ShflXor(double v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }

// The value of lane (lane - delta) of the warp; lanes below delta keep their own.
__device__ __forceinline__ int ShflUp(int v, int delta) { return __shfl_up_sync(0xffffffffu, v, delta); }

// 2^x on the special-function unit alone (exp2f adds a denormal-range
// fix-up around it): -Inf -> +0, NaN -> NaN, results below 2^-126 flush to 0.
__device__ __forceinline__ float Exp2Approx(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
  return r;
}

// 2^x as the C library's exp2f (denormal results kept, a few ulp).
__device__ __forceinline__ float Exp2(float x) { return exp2f(x); }

// Two f16 values (the low half first) -> two floats, exact.
__device__ __forceinline__ float2 Half2ToFloat2(uint32_t bits) {
  return __half22float2(*reinterpret_cast<const __half2*>(&bits));
}

// A load of data read once: cached in L2 only (ld.global.cg).
template <class T>
__device__ __forceinline__ T LoadOnce(const T* p) {
  return __ldcg(p);
}

}  // namespace gpu
}  // namespace kernelserve
#endif  // __CUDACC__

#endif  // KERNELSERVE_KERNELS_GPU_COMMON_VENDORS_CUDA_H_
