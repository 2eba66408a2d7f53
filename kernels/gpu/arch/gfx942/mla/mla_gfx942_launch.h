// The launch of the gfx942 MLA decode kernel (mla_decode_a16w8.hip), as pure
// host functions tested on the CPU: the CTA shape the kernel is compiled for,
// its grid, the split plan fixed from the shape and the CU count before
// anything is queued (so a launch never reads a device value on the host),
// and the merge of the split partials (kernels/gpu/mla/mla_merge.cu, built
// for gfx942 too). The kernel's code object is held to the same figures by
// //kernels/gpu/arch/gfx942/mla:mla_gfx942_hip_test.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_GFX942_MLA_MLA_GFX942_LAUNCH_H_
#define KERNELSERVE_KERNELS_GPU_ARCH_GFX942_MLA_MLA_GFX942_LAUNCH_H_

#include <cstddef>
#include <cstdint>

#include "kernels/gpu/mla/mla_decode_params.h"

namespace kernelserve {
namespace gpu {
namespace mla {
namespace gfx942 {

constexpr int kThreads = 512;         // eight wave64s per CTA
constexpr int kTileTok = 16;          // KV tokens per LDS tile
constexpr int kRowBytes = kD + 16;    // an fp8 KV row in LDS, padded
constexpr int kLdsBytes = 2 * kTileTok * kRowBytes;  // double-buffered: 18944
constexpr int kMergeThreads = 128;    // MlaMergeKernel's block

// The kernels' names in the code objects (C names, or the mangled name's
// identifier for the portable merge).
constexpr char kDecodeKernel[] = "KsMlaDecodeA16w8Gfx942";
constexpr char kMergeKernel[] = "MlaMergeKernel";

}  // namespace gfx942
}  // namespace mla
}  // namespace gpu
}  // namespace kernelserve

#if !defined(__HIP_DEVICE_COMPILE__)
#include "kernels/api/ops.h"
#include "kernels/gpu/mla/mla_split_plan.h"

namespace kernelserve {
namespace gpu {
namespace mla {
namespace gfx942 {

struct Dims {
  unsigned x = 1, y = 1, z = 1;
};

struct DecodeLaunch {
  MlaSplitPlan plan;
  KParams params;          // workspace pointers null until SetWorkspace
  Dims grid;               // (splits, row groups, batch)
  Dims merge_grid;         // (rows, batch); used only when `merge`
  bool merge = false;      // more than one split
  size_t workspace_bytes = 0;
};

// For a call that passed MlaDecodeParams::Validate; views and `out` are
// device memory; `compute_units` >= 1 (the device's CU count).
DecodeLaunch PlanDecode(const MlaDecodeParams& p, const MlaDecodeInputs& in, void* out, int compute_units);

// Points the partials of `launch` into `workspace` (workspace_bytes long).
void SetWorkspace(DecodeLaunch& launch, void* workspace);

}  // namespace gfx942
}  // namespace mla
}  // namespace gpu
}  // namespace kernelserve
#endif  // !__HIP_DEVICE_COMPILE__

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_GFX942_MLA_MLA_GFX942_LAUNCH_H_
