// The HIP runtime loader on this machine: no AMD GPU anywhere here, and ROCm's
// libamdhip64 present on some machines (Debian's libamdhip64-5) and absent
// on others, so each case says what it expects of either.
#include "kernels/gpu/hip/hip_runtime.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kernelserve {
namespace gpu {
namespace hip {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(LoadRuntime, NamesEveryLibraryTriedAndWhyInOrder) {
  auto r = LoadRuntime({"libks_no_such_hip.so", "/nonexistent/libamdhip64.so.6"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  const std::string m(r.status().message());
  EXPECT_THAT(m, StartsWith("cannot load the HIP runtime (ROCm's libamdhip64; install ROCm or put its lib "
                            "directory on LD_LIBRARY_PATH): tried libks_no_such_hip.so (libks_no_such_hip.so: "
                            "cannot open shared object file"));
  EXPECT_THAT(m, HasSubstr("; /nonexistent/libamdhip64.so.6 (/nonexistent/libamdhip64.so.6: cannot open shared "
                           "object file"));
  EXPECT_LT(m.find("libks_no_such_hip.so"), m.find("/nonexistent/"));
}

TEST(LoadRuntime, ALibraryWithoutTheEntryPointsIsNotTheRuntime) {
  auto r = LoadRuntime({"libc.so.6"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(r.status().message(), HasSubstr("tried libc.so.6 (loaded, but has no hipGetDeviceCount)"));
}

TEST(LoadRuntime, NoNamesIsUnavailable) {
  auto r = LoadRuntime({});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("tried no library"));
}

TEST(LoadRuntime, DefaultNamesDevelopmentLinkThenRocm6Then5) {
  EXPECT_EQ(DefaultLibraryNames(), (std::vector<std::string>{"libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"}));
}

TEST(SharedRuntime, LoadsOrSaysWhichLibrariesItTriedAndOnlyAnswersNoDeviceHere) {
  const absl::StatusOr<Runtime>& r = SharedRuntime();
  EXPECT_EQ(&r, &SharedRuntime());  // loaded once
  if (!r.ok()) {
    const std::string m(r.status().message());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(m, HasSubstr("tried libamdhip64.so ("));
    EXPECT_THAT(m, HasSubstr("; libamdhip64.so.6 ("));
    EXPECT_THAT(m, HasSubstr("; libamdhip64.so.5 ("));
    GTEST_SKIP() << "no HIP runtime on this machine: " << m;
  }
  // ROCm's runtime is here (no GPU is): every entry point resolved (the
  // graph API too: ROCm 5.2 has it), and the device count is an error or zero.
  EXPECT_GT(r->runtime_version, 0);
  EXPECT_TRUE(r->HasGraphs());
  int n = -1;
  const Error e = r->GetDeviceCount(&n);
  EXPECT_TRUE(e != kSuccess || n == 0) << "an AMD GPU answers on a machine documented to have none";
  if (e != kSuccess) {
    const absl::Status s = r->Check(e, "hipGetDeviceCount");
    EXPECT_EQ(s.code(), e == kErrorNoDevice ? absl::StatusCode::kUnavailable : absl::StatusCode::kInternal);
    EXPECT_THAT(std::string(s.message()), StartsWith("hipGetDeviceCount: hipError"));
  }
}

TEST(RuntimeCheck, CodesByKind) {
  const absl::StatusOr<Runtime>& loaded = SharedRuntime();
  Runtime bare;  // no entry points: described by number
  const Runtime& r = loaded.ok() ? *loaded : bare;
  EXPECT_TRUE(r.Check(kSuccess, "x").ok());
  EXPECT_EQ(r.Check(kErrorOutOfMemory, "hipMalloc").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(r.Check(kErrorIllegalAddress, "k").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(r.Check(kErrorLaunchFailure, "k").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(r.Check(kErrorNoBinaryForGpu, "k").code(), absl::StatusCode::kInternal);
  EXPECT_EQ(bare.Check(kErrorOutOfMemory, "hipMalloc").message(), "hipMalloc: hipError 2");
  if (loaded.ok()) {
    EXPECT_THAT(std::string(r.Check(kErrorOutOfMemory, "hipMalloc").message()), StartsWith("hipMalloc: hipErrorOutOfMemory"));
  }
}

}  // namespace
}  // namespace hip
}  // namespace gpu
}  // namespace kernelserve
