// The HIP side of the vendor layer (gpu.h includes it when compiling for
// AMD; nothing else does): the CUDA runtime names this tree uses, mapped to
// HIP's, and CUDA's device built-ins in terms of AMDGPU's, as ggml's
// vendors/hip.h does. A name missing here is a compile error in the HIP
// build, never a silent difference.
#ifndef KERNELSERVE_KERNELS_GPU_COMMON_VENDORS_HIP_H_
#define KERNELSERVE_KERNELS_GPU_COMMON_VENDORS_HIP_H_

#include <hip/hip_runtime.h>

#include <cstddef>
#include <cstdint>

#define KS_GPU_VENDOR "hip"  // the backend's name
#define KS_GPU_VENDOR_NAME "HIP"  // in messages
#define KS_GPU_CREATE_BACKEND CreateHipBackend
#define KS_GPU_VENDOR_STICKY_ERRORS

// Runtime API.
#define cudaDevAttrClockRate hipDeviceAttributeClockRate
#define cudaDevAttrComputeCapabilityMajor hipDeviceAttributeComputeCapabilityMajor
#define cudaDevAttrComputeCapabilityMinor hipDeviceAttributeComputeCapabilityMinor
#define cudaDevAttrMaxSharedMemoryPerBlockOptin hipDeviceAttributeSharedMemPerBlockOptin
#define cudaDevAttrMemoryClockRate hipDeviceAttributeMemoryClockRate
#define cudaDevAttrMultiProcessorCount hipDeviceAttributeMultiprocessorCount
#define cudaDeviceGetAttribute hipDeviceGetAttribute
#define cudaDeviceProp hipDeviceProp_t
#define cudaDeviceSynchronize hipDeviceSynchronize
#define cudaDriverGetVersion hipDriverGetVersion
#define cudaError_t hipError_t
#define cudaEventCreate hipEventCreate
#define cudaEventDestroy hipEventDestroy
#define cudaEventElapsedTime hipEventElapsedTime
#define cudaEventRecord hipEventRecord
#define cudaEventSynchronize hipEventSynchronize
#define cudaEvent_t hipEvent_t
#define cudaFree hipFree
#define cudaFreeAsync hipFreeAsync
#define cudaFreeHost hipHostFree
#define cudaFuncAttributeMaxDynamicSharedMemorySize hipFuncAttributeMaxDynamicSharedMemorySize
#define cudaFuncSetAttribute(f, a, v) hipFuncSetAttribute(reinterpret_cast<const void*>(f), a, v)
#define cudaGetDevice hipGetDevice
#define cudaGetDeviceCount hipGetDeviceCount
#define cudaGetDeviceProperties hipGetDeviceProperties
#define cudaGetErrorName hipGetErrorName
#define cudaGetErrorString hipGetErrorString
#define cudaGetLastError hipGetLastError
#define cudaGraphDestroy hipGraphDestroy
#define cudaGraphExecDestroy hipGraphExecDestroy
#define cudaGraphExec_t hipGraphExec_t
#define cudaGraphInstantiateWithFlags hipGraphInstantiateWithFlags
#define cudaGraphLaunch hipGraphLaunch
#define cudaGraph_t hipGraph_t
#define cudaHostAlloc hipHostMalloc
#define cudaHostAllocPortable hipHostMallocPortable
#define cudaMalloc hipMalloc
#define cudaMallocAsync hipMallocAsync
#define cudaMemcpy hipMemcpy
#define cudaMemcpyAsync hipMemcpyAsync
#define cudaMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define cudaMemcpyDeviceToHost hipMemcpyDeviceToHost
#define cudaMemcpyHostToDevice hipMemcpyHostToDevice
#define cudaMemcpyKind hipMemcpyKind
#define cudaMemset hipMemset
#define cudaMemsetAsync hipMemsetAsync
#define cudaPeekAtLastError hipPeekAtLastError
#define cudaRuntimeGetVersion hipRuntimeGetVersion
#define cudaSetDevice hipSetDevice
#define cudaStreamBeginCapture hipStreamBeginCapture
#define cudaStreamCaptureModeThreadLocal hipStreamCaptureModeThreadLocal
#define cudaStreamCaptureStatus hipStreamCaptureStatus
#define cudaStreamCaptureStatusNone hipStreamCaptureStatusNone
#define cudaStreamCreate hipStreamCreate
#define cudaStreamCreateWithFlags hipStreamCreateWithFlags
#define cudaStreamDestroy hipStreamDestroy
#define cudaStreamEndCapture hipStreamEndCapture
#define cudaStreamIsCapturing hipStreamIsCapturing
#define cudaStreamNonBlocking hipStreamNonBlocking
#define cudaStreamSynchronize hipStreamSynchronize
#define cudaStream_t hipStream_t
#define cudaSuccess hipSuccess

// Errors (gpu_status.cc maps them to absl::Status). HIP has no counterpart
// of CUDA's tensor-memory leak and contained-error codes.
#define cudaErrorAssert hipErrorAssert
#define cudaErrorDevicesUnavailable hipErrorNoDevice
#define cudaErrorECCUncorrectable hipErrorECCNotCorrectable
#define cudaErrorHardwareStackError hipErrorLaunchFailure
#define cudaErrorIllegalAddress hipErrorIllegalAddress
#define cudaErrorIllegalInstruction hipErrorLaunchFailure
#define cudaErrorInsufficientDriver hipErrorInsufficientDriver
#define cudaErrorInvalidAddressSpace hipErrorLaunchFailure
#define cudaErrorInvalidPc hipErrorLaunchFailure
#define cudaErrorInvalidValue hipErrorInvalidValue
#define cudaErrorLaunchFailure hipErrorLaunchFailure
#define cudaErrorLaunchTimeout hipErrorLaunchTimeOut
#define cudaErrorMemoryAllocation hipErrorOutOfMemory
#define cudaErrorMisalignedAddress hipErrorLaunchFailure
#define cudaErrorNoDevice hipErrorNoDevice
#define cudaErrorNotSupported hipErrorNotSupported
#define cudaErrorUnknown hipErrorUnknown

#if defined(__HIP_DEVICE_COMPILE__)
// Debian 12 ships no ROCm device libraries for gfx942, so the build compiles
// device code with -nogpulib (bazel/hip.bzl). HIP's headers read thread and
// block ids and sizes through these device-library entry points; they are
// defined here from the compiler's built-ins, with the device libraries'
// meaning (sizes from the dispatch packet of the HSA ABI).
#if defined(KS_HIP_NO_DEVICE_LIBS)
extern "C" {
__device__ inline size_t __ockl_get_local_id(unsigned d) {
  return d == 0 ? __builtin_amdgcn_workitem_id_x() : d == 1 ? __builtin_amdgcn_workitem_id_y()
                                                             : __builtin_amdgcn_workitem_id_z();
}
__device__ inline size_t __ockl_get_group_id(unsigned d) {
  return d == 0 ? __builtin_amdgcn_workgroup_id_x() : d == 1 ? __builtin_amdgcn_workgroup_id_y()
                                                              : __builtin_amdgcn_workgroup_id_z();
}
__device__ inline size_t __ockl_get_local_size(unsigned d) {
  return d == 0 ? __builtin_amdgcn_workgroup_size_x() : d == 1 ? __builtin_amdgcn_workgroup_size_y()
                                                                : __builtin_amdgcn_workgroup_size_z();
}
// hsa_kernel_dispatch_packet_t: grid_size_x/y/z are the 32-bit words 3..5.
__device__ inline size_t __ockl_get_global_size(unsigned d) {
  return static_cast<const uint32_t*>(__builtin_amdgcn_dispatch_ptr())[3 + d];
}
__device__ inline size_t __ockl_get_num_groups(unsigned d) {
  const size_t wg = __ockl_get_local_size(d);
  return (__ockl_get_global_size(d) + wg - 1) / wg;
}
// __syncthreads' fences (hip.amdgcn.bc's entry point): a fence of `order`
// at `scope` on every memory (the fence flags only narrow what it orders).
#define KS_HIP_FENCE_AT_SCOPE(ORDER)                                          \
  switch (scope) {                                                            \
    case __memory_scope_work_item: break;                                     \
    case __memory_scope_sub_group: __builtin_amdgcn_fence(ORDER, "wavefront"); break; \
    case __memory_scope_work_group: __builtin_amdgcn_fence(ORDER, "workgroup"); break; \
    case __memory_scope_device: __builtin_amdgcn_fence(ORDER, "agent"); break; \
    default: __builtin_amdgcn_fence(ORDER, ""); break;                        \
  }
__device__ inline void __atomic_work_item_fence(__cl_mem_fence_flags, __memory_order order, __memory_scope scope) {
  switch (order) {
    case __memory_order_acquire: KS_HIP_FENCE_AT_SCOPE(__ATOMIC_ACQUIRE) break;
    case __memory_order_release: KS_HIP_FENCE_AT_SCOPE(__ATOMIC_RELEASE) break;
    case __memory_order_acq_rel: KS_HIP_FENCE_AT_SCOPE(__ATOMIC_ACQ_REL) break;
    case __memory_order_seq_cst: KS_HIP_FENCE_AT_SCOPE(__ATOMIC_SEQ_CST) break;
    default: break;  // relaxed: no fence
  }
}
#undef KS_HIP_FENCE_AT_SCOPE
}  // extern "C"
#endif  // KS_HIP_NO_DEVICE_LIBS

namespace kernelserve {
namespace gpu {

// gfx9 (CDNA) runs wave64.
constexpr int kWarpSize = 64;

__device__ __forceinline__ float ShflXor(float v, int mask) { return __shfl_xor(v, mask); }
__device__ __forceinline__ double ShflXor(double v, int mask) { return __shfl_xor(v, mask); }

// The value of lane (lane - delta) of the wavefront; lanes below delta keep their own.
__device__ __forceinline__ int ShflUp(int v, int delta) { return __shfl_up(v, delta); }

// 2^x on the transcendental unit (v_exp_f32), as CUDA's ex2.approx.
__device__ __forceinline__ float Exp2Approx(float x) { return __builtin_amdgcn_exp2f(x); }

// 2^x as the C library's exp2f (denormal results kept), from the compiler's
// exp2 intrinsic: no device-library call.
__device__ __forceinline__ float Exp2(float x) { return __builtin_exp2f(x); }

// Two f16 values (the low half first) -> two floats, exact.
__device__ __forceinline__ float2 Half2ToFloat2(uint32_t bits) {
  typedef _Float16 Half2 __attribute__((ext_vector_type(2)));
  const Half2 h = __builtin_bit_cast(Half2, bits);
  return make_float2(static_cast<float>(h.x), static_cast<float>(h.y));
}

// A load of data read once (CUDA's ld.global.cg: not kept in L1).
template <class T>
__device__ __forceinline__ T LoadOnce(const T* p) {
  return __builtin_nontemporal_load(p);
}
// HIP's float2, uint4, ... are structs around a clang vector, which the
// builtin takes.
template <class T, unsigned int kN>
__device__ __forceinline__ HIP_vector_type<T, kN> LoadOnce(const HIP_vector_type<T, kN>* p) {
  HIP_vector_type<T, kN> r;
  r.data = __builtin_nontemporal_load(&p->data);
  return r;
}

}  // namespace gpu
}  // namespace kernelserve
#endif  // __HIP_DEVICE_COMPILE__

#endif  // KERNELSERVE_KERNELS_GPU_COMMON_VENDORS_HIP_H_
