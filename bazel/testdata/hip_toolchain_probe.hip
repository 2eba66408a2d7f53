// The smallest kernel that shows the AMD device toolchain works end to end:
// the HIP headers parse, an MFMA builtin lowers to the matrix instruction, and
// lld links a code object (no ROCm device libraries: workitem ids come from
// the builtin, not threadIdx, which calls into them).
#include <hip/hip_runtime.h>

typedef float Float4 __attribute__((ext_vector_type(4)));
typedef short Bf16x4 __attribute__((ext_vector_type(4)));

extern "C" __global__ void ToolchainProbe(const Bf16x4* a, const Bf16x4* b, Float4* c) {
  const int i = __builtin_amdgcn_workitem_id_x();
  c[i] = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a[i], b[i], c[i], 0, 0, 0);
}
