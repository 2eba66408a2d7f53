/* Small value codecs for user kernels (kernels/api/user_kernel_abi.h): bf16,
 * FP8 (e4m3fn, e4m3fnuz), MXFP4's E2M1 and E8M0. The server puts this header
 * beside user_kernel_abi.h when it compiles a kernel, so a submitted source
 * may include it; it is plain C (C99 / C++ / CUDA C++ / HIP C++; host and
 * device in CUDA and HIP). These are the codecs of DESIGN §4, written for
 * clarity: a fast kernel would use the hardware's conversions.
 *
 * In HIP it also includes <hip/hip_runtime.h> (threadIdx, __global__, the
 * math functions). The server compiles HIP without ROCm's device libraries
 * (-nogpulib -DKS_HIP_NO_DEVICE_LIBS: a node may have only clang and the
 * HIP headers), so the work-item and workgroup ids and sizes that HIP's
 * headers read through those libraries are defined below from the
 * compiler's AMDGPU built-ins; a kernel that calls other device-library
 * functions (__ockl_*, __ocml_* beyond what clang lowers itself) does not
 * link there.
 */
#ifndef KERNELSERVE_KERNELS_API_USER_KERNEL_UTIL_H_
#define KERNELSERVE_KERNELS_API_USER_KERNEL_UTIL_H_

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__HIP__)
#include <hip/hip_runtime.h>
#endif

#include "kernels/api/user_kernel_abi.h"

#if defined(__HIP_DEVICE_COMPILE__) && defined(KS_HIP_NO_DEVICE_LIBS)
/* Dimension d (0: x, 1: y, 2: z), as ROCm's device library defines them. */
extern "C" {
__device__ inline size_t __ockl_get_local_id(unsigned d) {
  return d == 0 ? __builtin_amdgcn_workitem_id_x() : d == 1 ? __builtin_amdgcn_workitem_id_y() : __builtin_amdgcn_workitem_id_z();
}
__device__ inline size_t __ockl_get_group_id(unsigned d) {
  return d == 0 ? __builtin_amdgcn_workgroup_id_x() : d == 1 ? __builtin_amdgcn_workgroup_id_y() : __builtin_amdgcn_workgroup_id_z();
}
__device__ inline size_t __ockl_get_local_size(unsigned d) {
  return d == 0 ? __builtin_amdgcn_workgroup_size_x() : d == 1 ? __builtin_amdgcn_workgroup_size_y()
                                                               : __builtin_amdgcn_workgroup_size_z();
}
/* The HSA dispatch packet's grid_size_x/y/z are its 32-bit words 3..5. */
__device__ inline size_t __ockl_get_num_groups(unsigned d) {
  const size_t grid = ((const uint32_t*)__builtin_amdgcn_dispatch_ptr())[3 + d];
  return (grid + __ockl_get_local_size(d) - 1) / __ockl_get_local_size(d);
}
/* __syncthreads' (and HIP's other) fences: `order` at the workgroup's scope
 * when no wider one is asked for (a sub-group's widened to it, which is
 * always correct), else at the device's (agent) scope or the system's. */
#define KS_HIP_FENCE_AT(ORDER)                                                      \
  if (scope == __memory_scope_device) __builtin_amdgcn_fence(ORDER, "agent");       \
  else if (scope == __memory_scope_all_svm_devices) __builtin_amdgcn_fence(ORDER, ""); \
  else __builtin_amdgcn_fence(ORDER, "workgroup")
__device__ inline void __atomic_work_item_fence(__cl_mem_fence_flags, __memory_order order, __memory_scope scope) {
  if (scope == __memory_scope_work_item) return;
  if (order == __memory_order_acquire) { KS_HIP_FENCE_AT(__ATOMIC_ACQUIRE); }
  else if (order == __memory_order_release) { KS_HIP_FENCE_AT(__ATOMIC_RELEASE); }
  else if (order == __memory_order_acq_rel) { KS_HIP_FENCE_AT(__ATOMIC_ACQ_REL); }
  else if (order == __memory_order_seq_cst) { KS_HIP_FENCE_AT(__ATOMIC_SEQ_CST); }
}
#undef KS_HIP_FENCE_AT
}  /* extern "C" */
#endif

#if defined(__CUDACC__) || defined(__HIP__)
#define KS_HD __host__ __device__ static inline
#else
#define KS_HD static inline
#endif

KS_HD float ks_bf16_to_float(uint16_t bits) {
  uint32_t u = (uint32_t)bits << 16;
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

/* Rounded once in `rounding` (KS_ROUND_*); NaN becomes 0x7FFF. */
KS_HD uint16_t ks_float_to_bf16(float f, int32_t rounding) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FFF;
  if (rounding == KS_ROUND_RTZ) return (uint16_t)(u >> 16);
  if (rounding == KS_ROUND_RTNA) return (uint16_t)((u + 0x8000u) >> 16);
  return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/* format: KS_FP8_E4M3FN (bias 7, NaN S.1111.111) or KS_FP8_E4M3FNUZ (bias 8, NaN 0x80). */
KS_HD float ks_fp8_to_float(uint8_t code, int32_t format) {
  const int fnuz = format == KS_FP8_E4M3FNUZ;
  if (fnuz ? code == 0x80 : (code & 0x7F) == 0x7F) return NAN;
  const int e = (code >> 3) & 15, m = code & 7, bias = fnuz ? 8 : 7;
  const float mag = e == 0 ? ldexpf((float)m / 8.0f, 1 - bias) : ldexpf(1.0f + (float)m / 8.0f, e - bias);
  return (code & 0x80) ? -mag : mag;
}

/* One E2M1 element (the low 4 bits of `nibble`). */
KS_HD float ks_e2m1_to_float(uint8_t nibble) {
  const float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float mag = kMag[nibble & 7];
  return (nibble & 8) ? -mag : mag;
}

KS_HD float ks_e8m0_to_float(uint8_t e) { return e == 255 ? NAN : ldexpf(1.0f, (int)e - 127); }

/* Element i of an MXFP4 row (codes packed two per byte, a scale per 32). */
KS_HD float ks_mxfp4_at(const uint8_t* codes, const uint8_t* scales, int64_t i) {
  const uint8_t byte = codes[i / 2];
  return ks_e2m1_to_float((i & 1) ? (uint8_t)(byte >> 4) : (uint8_t)(byte & 15)) * ks_e8m0_to_float(scales[i / 32]);
}

#endif /* KERNELSERVE_KERNELS_API_USER_KERNEL_UTIL_H_ */
