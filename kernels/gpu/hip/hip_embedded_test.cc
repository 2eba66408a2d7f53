// The code objects this binary carries: linked gfx942 ELF objects (what
// hipModuleLoadData takes) holding every kernel the variant table launches.
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/gpu/arch/gfx942/attention/attention_gfx942_launch.h"
#include "kernels/gpu/arch/gfx942/fp8_attention/fp8_attention_gfx942_launch.h"
#include "kernels/gpu/arch/gfx942/mla/mla_gfx942_launch.h"
#include "kernels/gpu/arch/gfx942/moe/moe_gfx942_launch.h"
#include "kernels/gpu/hip/hip_code_objects.h"

namespace kernelserve {
namespace gpu {
namespace hip {
namespace {

TEST(EmbeddedCodeObjects, LinkedGfx942ElfObjects) {
  const auto& objects = EmbeddedCodeObjects();
  ASSERT_FALSE(objects.empty());
  for (const CodeObject& o : objects) {
    EXPECT_STREQ(o.arch, "gfx942") << o.name;
    ASSERT_GT(o.size, 64u) << o.name;
    EXPECT_EQ(std::memcmp(o.data, "\x7f" "ELF", 4), 0) << o.name;
    EXPECT_EQ(o.data[4], 2) << o.name << ": not ELF64";
    EXPECT_EQ(o.data[7], 64) << o.name << ": OS ABI is not AMDGPU HSA";
    EXPECT_EQ(o.data[16], 3) << o.name << ": not a shared object (a linked code object)";
    EXPECT_FALSE(o.kernels.empty()) << o.name;
  }
}

TEST(EmbeddedCodeObjects, HoldEveryKernelTheTableLaunches) {
  // hip_variants.cc launches these by name.
  std::vector<const char*> names;
  for (const attention::gfx942::HdimKernels& k : attention::gfx942::kKernels) {
    names.insert(names.end(), {k.fwd, k.causal, k.v_transpose, k.merge});
  }
  for (const char* kernel : {mla::gfx942::kDecodeKernel, mla::gfx942::kDecodePosKernel, mla::gfx942::kMergeKernel, moe::gfx942::kGemmBf16,
                             moe::gfx942::kGemmSwiglu, moe::gfx942::kGemmF32, moe::gfx942::kPrefillBf16,
                             moe::gfx942::kPrefillSwiglu, moe::gfx942::kPrefillF32, moe::gfx942::kDownBf16,
                             moe::gfx942::kDownF32, "MoeCountKernel", "MoeScanKernel",
                             "MoeScatterKernel", "MoeWeightedSumKernel", "AmaxKernel", "QuantizeKernel",
                             "DescaleKernel"}) {
    names.push_back(kernel);
  }
  for (const char* kernel : names) {
    int found = 0;
    for (const CodeObject& o : EmbeddedCodeObjects()) found += !FindKernelSymbol(o, kernel).empty();
    EXPECT_EQ(found, 1) << kernel;
  }
  for (const auto& by_dqk : fp8_attention::gfx942::kKernels) {
    for (const auto& by_mask : by_dqk) {
      for (const char* kernel : by_mask) {
        int found = 0;
        for (const CodeObject& o : EmbeddedCodeObjects()) found += !FindKernelSymbol(o, kernel).empty();
        EXPECT_EQ(found, 1) << kernel;
      }
    }
  }
}

}  // namespace
}  // namespace hip
}  // namespace gpu
}  // namespace kernelserve
