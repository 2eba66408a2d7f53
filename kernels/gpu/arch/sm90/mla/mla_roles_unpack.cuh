// The roles kernel's loads: Q into the core-tiled wgmma layout, and fp8 KV
// rows read once from global memory and unpacked to bf16 core-tiled tiles.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM90_MLA_MLA_ROLES_UNPACK_CUH_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM90_MLA_MLA_ROLES_UNPACK_CUH_

#include <cstdint>

#include "kernels/gpu/arch/sm90/mla/mla_sm90_common.cuh"
#include "kernels/gpu/common/fp8.cuh"
#include "kernels/gpu/mla/mla_decode_params.h"
#include "kernels/gpu/mla/mla_tile_scheduler.cuh"

namespace kernelserve {
namespace gpu {
namespace mla {

constexpr int kRolesThreads = 256;  // two warpgroups

// The CTA's 64 query rows (q_lat then q_pe, 576 bf16) into the core-tiled
// layout; rows past nrows are zeros.
__device__ __forceinline__ void LoadQCoreTiled(uint8_t* sQ, const KParams& p, const CtaWork& w, int tid) {
  const uint16_t* qlat = p.q_lat + (static_cast<int64_t>(w.b) * p.rows + w.row0) * kDL;
  const uint16_t* qpe = p.q_pe + (static_cast<int64_t>(w.b) * p.rows + w.row0) * kDR;
  for (int c = tid; c < kRows * (kD / 8); c += kRolesThreads) {
    const int r = c / (kD / 8), col = c % (kD / 8);
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < w.nrows) {
      v = col < kDL / 8 ? reinterpret_cast<const uint4*>(qlat + static_cast<int64_t>(r) * kDL)[col]
                        : reinterpret_cast<const uint4*>(qpe + static_cast<int64_t>(r) * kDR)[col - kDL / 8];
    }
    *reinterpret_cast<uint4*>(sQ + CoreTiled(r, col * 8)) = v;
  }
}

// 16 bytes from global memory that are read once (no L1 allocation), or zeros
// where `pred` is false (tokens past the chunk).
__device__ __forceinline__ uint4 LdgStreamOrZero(const void* src, bool pred) {
  uint4 v;
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %5, 0;\n"
      "mov.b32 %0, 0;\nmov.b32 %1, 0;\nmov.b32 %2, 0;\nmov.b32 %3, 0;\n"
      "@p ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n}\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(src), "r"(static_cast<int>(pred)));
  return v;
}

// 16 e4m3fnuz codes of one row -> 16 bf16 at `dst` (a core-tiled 8-column
// pair: the second 8 columns sit 128 bytes on).
__device__ __forceinline__ void UnpackChunk(uint8_t* dst, const uint4 v) {
  uint4 o0, o1;
  o0.x = E4m3fnuzX2ToBf16x2(v.x);
  o0.y = E4m3fnuzX2ToBf16x2(v.x >> 16);
  o0.z = E4m3fnuzX2ToBf16x2(v.y);
  o0.w = E4m3fnuzX2ToBf16x2(v.y >> 16);
  o1.x = E4m3fnuzX2ToBf16x2(v.z);
  o1.y = E4m3fnuzX2ToBf16x2(v.z >> 16);
  o1.z = E4m3fnuzX2ToBf16x2(v.w);
  o1.w = E4m3fnuzX2ToBf16x2(v.w >> 16);
  *reinterpret_cast<uint4*>(dst) = o0;
  *reinterpret_cast<uint4*>(dst + 128) = o1;
}

}  // namespace mla
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM90_MLA_MLA_ROLES_UNPACK_CUH_
