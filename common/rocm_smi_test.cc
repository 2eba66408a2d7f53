// ROCm SMI on this machine: no AMD GPU anywhere here, and librocm_smi64
// present on some machines (Debian's librocm-smi64-1, which .ci/setup
// installs) and absent on others, so each case says what it expects of either.
#include "common/rocm_smi.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kernelserve {
namespace rocm_smi {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(SmiIndex, WithoutVisibilityListsTheIndexIsTheDevice) {
  EXPECT_EQ(*SmiIndex(0, "", ""), 0u);
  EXPECT_EQ(*SmiIndex(5, "", ""), 5u);
  EXPECT_EQ(*SmiIndex(3, "  ", ""), 3u);
}

TEST(SmiIndex, HipVisibleDevicesSelectsAmongAllGpus) {
  EXPECT_EQ(*SmiIndex(0, "", "6,2"), 6u);
  EXPECT_EQ(*SmiIndex(1, "", "6,2"), 2u);
  EXPECT_EQ(*SmiIndex(1, "", " 6 , 2 "), 2u);
}

TEST(SmiIndex, RocrVisibleDevicesSelectsFirstAndHipIndexesIntoItsList) {
  EXPECT_EQ(*SmiIndex(0, "4,5,7", ""), 4u);
  EXPECT_EQ(*SmiIndex(2, "4,5,7", ""), 7u);
  // HIP device 0 is ROCr's device 2, which is GPU 7.
  EXPECT_EQ(*SmiIndex(0, "4,5,7", "2,0"), 7u);
  EXPECT_EQ(*SmiIndex(1, "4,5,7", "2,0"), 4u);
}

TEST(SmiIndex, AnEntryThatIsNotAnIndexNamesTheVariable) {
  auto r = SmiIndex(0, "GPU-4b2e1c3d5f6a7b8c", "");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "ROCR_VISIBLE_DEVICES=\"GPU-4b2e1c3d5f6a7b8c\": entry \"GPU-4b2e1c3d5f6a7b8c\" is not a device index "
            "(GPU UUIDs are not mapped to SMI indices)");
  r = SmiIndex(0, "", "1,x");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), StartsWith("HIP_VISIBLE_DEVICES=\"1,x\": entry \"x\" is not a device index"));
  r = SmiIndex(0, "", "-1");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("entry \"-1\" is not a device index"));
}

TEST(SmiIndex, ADevicePastTheListIsRefused) {
  auto r = SmiIndex(2, "", "0,1");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "HIP_VISIBLE_DEVICES=\"0,1\" lists 2 devices: device 2 is not among them");
  // HIP's list points past ROCr's.
  r = SmiIndex(0, "3", "1");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "ROCR_VISIBLE_DEVICES=\"3\" lists 1 devices: device 1 is not among them");
  r = SmiIndex(-1, "", "");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SmiIndex, FromTheEnvironmentReadsRocrThenHipOrCuda) {
  ASSERT_EQ(setenv("ROCR_VISIBLE_DEVICES", "4,5,7", 1), 0);
  ASSERT_EQ(setenv("CUDA_VISIBLE_DEVICES", "1", 1), 0);
  unsetenv("HIP_VISIBLE_DEVICES");
  EXPECT_EQ(*SmiIndexFromEnvironment(0), 5u);  // CUDA_VISIBLE_DEVICES stands in for HIP's
  ASSERT_EQ(setenv("HIP_VISIBLE_DEVICES", "2", 1), 0);
  EXPECT_EQ(*SmiIndexFromEnvironment(0), 7u);  // HIP's wins over CUDA's
  unsetenv("ROCR_VISIBLE_DEVICES");
  unsetenv("CUDA_VISIBLE_DEVICES");
  unsetenv("HIP_VISIBLE_DEVICES");
  EXPECT_EQ(*SmiIndexFromEnvironment(3), 3u);
}

// rsmi_frequencies_t as rocm_smi.h lays it out before and after ROCm 6.
struct V5 {
  uint32_t num_supported, current;
  uint64_t frequency[32];
};
struct V6 {
  bool has_deep_sleep;
  uint32_t num_supported, current;
  uint64_t frequency[33];
};

TEST(DecodeFrequencies, ReadsBothLayouts) {
  alignas(8) unsigned char raw[kFrequenciesBufferBytes] = {};
  V5 v5{};
  v5.num_supported = 3;
  v5.current = 1;
  v5.frequency[0] = 500'000'000;
  v5.frequency[1] = 1'700'000'000;
  v5.frequency[2] = 2'100'000'000;
  std::memcpy(raw, &v5, sizeof(v5));
  auto f = DecodeFrequencies(raw, /*v6_layout=*/false);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->current_hz, 1'700'000'000u);
  EXPECT_EQ(f->max_hz, 2'100'000'000u);

  V6 v6{};
  v6.has_deep_sleep = true;
  v6.num_supported = 2;
  v6.current = 0;
  v6.frequency[0] = 900'000'000;
  v6.frequency[1] = 1'300'000'000;
  std::memset(raw, 0, sizeof(raw));
  std::memcpy(raw, &v6, sizeof(v6));
  f = DecodeFrequencies(raw, /*v6_layout=*/true);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->current_hz, 900'000'000u);
  EXPECT_EQ(f->max_hz, 1'300'000'000u);
  // The same bytes read with the old layout do not make sense, and say so.
  EXPECT_EQ(DecodeFrequencies(raw, false).status().code(), absl::StatusCode::kDataLoss);
}

TEST(DecodeFrequencies, CountsOutsideTheLayoutAreDataLoss) {
  alignas(8) unsigned char raw[kFrequenciesBufferBytes] = {};
  EXPECT_EQ(DecodeFrequencies(raw, false).status().message(),
            "rsmi_frequencies_t: 0 frequencies, current index 0 (expected 1..32 and an index below the count)");
  V6 v6{};
  v6.num_supported = 34;
  std::memcpy(raw, &v6, sizeof(v6));
  EXPECT_THAT(std::string(DecodeFrequencies(raw, true).status().message()), HasSubstr("34 frequencies"));
  v6.num_supported = 2;
  v6.current = 2;
  std::memcpy(raw, &v6, sizeof(v6));
  EXPECT_THAT(std::string(DecodeFrequencies(raw, true).status().message()), HasSubstr("current index 2 (expected 1..33"));
}

TEST(DecodeFrequencies, TheLayoutFollowsTheLibrarysMajorVersion) {
  EXPECT_FALSE(UsesV6FrequencyLayout(1));  // Debian 12's ROCm 5.2.3 build
  EXPECT_FALSE(UsesV6FrequencyLayout(5));
  EXPECT_TRUE(UsesV6FrequencyLayout(6));
  EXPECT_TRUE(UsesV6FrequencyLayout(7));
}

TEST(SmiOpen, NamesEveryLibraryTriedAndWhy) {
  auto s = Smi::Open({"libks_no_such_smi.so", "/nonexistent/librocm_smi64.so.6"});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnavailable);
  const std::string m(s.status().message());
  EXPECT_THAT(m, StartsWith("cannot load ROCm SMI (librocm_smi64; install ROCm or Debian's librocm-smi64-1, or put "
                            "its lib directory on LD_LIBRARY_PATH): tried libks_no_such_smi.so (libks_no_such_smi.so: "
                            "cannot open shared object file"));
  EXPECT_THAT(m, HasSubstr("; /nonexistent/librocm_smi64.so.6 (/nonexistent/librocm_smi64.so.6: cannot open"));
}

TEST(SmiOpen, ALibraryWithoutTheEntryPointsIsNotSmi) {
  auto s = Smi::Open({"libc.so.6"});
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("tried libc.so.6 (loaded, but has no rsmi_init)"));
  EXPECT_THAT(std::string(Smi::Open({}).status().message()), HasSubstr("tried no library"));
}

// The installed library (if any) on a machine without an AMD GPU: rsmi_init
// fails, and the status says so with the library's own text.
TEST(SmiOpen, TheInstalledLibraryFailsCleanlyWithoutAnAmdGpu) {
  if (access("/dev/kfd", F_OK) == 0) GTEST_SKIP() << "/dev/kfd exists: this machine may have an AMD GPU";
  std::string found;
  for (const std::string& name : DefaultLibraryNames()) {
    if (void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      dlclose(h);
      found = name;
      break;
    }
  }
  auto s = Smi::Open();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnavailable);
  if (found.empty()) {
    EXPECT_THAT(std::string(s.status().message()), StartsWith("cannot load ROCm SMI"));
    GTEST_SKIP() << "no librocm_smi64 here (" << s.status() << "); Debian's librocm-smi64-1 tests the rest";
  }
  const std::string m(s.status().message());
  if (m.find("rsmi_init failed") == 0) {
    EXPECT_THAT(m, StartsWith("rsmi_init failed (RSMI status "));
    EXPECT_THAT(m, HasSubstr(" in " + found + " "));
    EXPECT_THAT(m, HasSubstr("no AMD GPU visible to ROCm SMI"));
  } else {
    // A machine with a DRM class but no amdgpu device: it initialises and finds none.
    EXPECT_THAT(m, StartsWith("ROCm SMI (" + found + " "));
    EXPECT_THAT(m, HasSubstr(") sees no AMD GPU: 0 devices"));
  }
}

}  // namespace
}  // namespace rocm_smi
}  // namespace kernelserve
