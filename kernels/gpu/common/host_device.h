// KS_HOST_DEVICE marks a function that runs on the host and on the device:
// __host__ __device__ under a device compiler (nvcc, clang for HIP), nothing
// under a plain C++ compiler. Pure functions that kernels and their launchers
// share (tile counts, code conversions) are written once with it and tested
// on the CPU by ordinary tests, which include no vendor header.
#ifndef KERNELSERVE_KERNELS_GPU_COMMON_HOST_DEVICE_H_
#define KERNELSERVE_KERNELS_GPU_COMMON_HOST_DEVICE_H_

#if defined(__CUDACC__) || defined(__HIP__)
// (__forceinline__ spelled out: HIP defines it only in its runtime header.)
#define KS_HOST_DEVICE __host__ __device__ inline __attribute__((always_inline))
#else
#define KS_HOST_DEVICE inline
#endif

#endif  // KERNELSERVE_KERNELS_GPU_COMMON_HOST_DEVICE_H_
