#include "kernels/backends.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "local_config_cuda/config.h"

namespace kernelserve {
namespace {

using ::testing::HasSubstr;

TEST(BackendsTest, BuiltBackendsNameEveryBackendAndSayWhy) {
  const auto builds = BuiltBackends();
  ASSERT_EQ(builds.size(), 3u);
  EXPECT_EQ(builds[0].name, "cpu");
  EXPECT_TRUE(builds[0].built);
  EXPECT_EQ(builds[1].name, "cuda");
  EXPECT_EQ(builds[1].built, KERNELSERVE_HAVE_CUDA == 1);
  EXPECT_EQ(builds[2].name, "hip");
  EXPECT_FALSE(builds[2].built);
  EXPECT_THAT(builds[2].note, HasSubstr("no HIP (AMD) backend"));
  for (const auto& b : builds) EXPECT_FALSE(b.note.empty()) << b.name;
  if (!builds[1].built) {
    EXPECT_THAT(builds[1].note, HasSubstr("set CUDA_PATH and rebuild"));
    EXPECT_THAT(builds[1].note, HasSubstr("looked for nvcc in:"));
  } else {
    EXPECT_THAT(builds[1].note, HasSubstr("nvcc"));
  }
}

TEST(BackendsTest, CudaIsUnimplementedWithoutTheToolkitElseFindsADeviceOrSaysNone) {
  std::string note;
  auto b = CreateBackend("cuda", {}, &note);
  if (!KERNELSERVE_HAVE_CUDA) {
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(b.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(b.status().message(),
                HasSubstr("this build has no CUDA backend (built without nvcc; set CUDA_PATH and rebuild)"));
  } else if (!b.ok()) {
    EXPECT_EQ(b.status().code(), absl::StatusCode::kUnavailable) << b.status();
    EXPECT_THAT(b.status().message(), HasSubstr("no CUDA device"));
  } else {
    EXPECT_EQ((*b)->Name(), "cuda");
    EXPECT_EQ(note, "backend cuda (requested)");
  }
}

TEST(BackendsTest, HipIsUnimplemented) {
  auto b = CreateBackend("hip", {});
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(b.status().message(), HasSubstr("no HIP (AMD) backend"));
}

TEST(BackendsTest, AutoSaysWhyItTookTheBackendItTook) {
  std::string note;
  auto b = CreateBackend("auto", {.cpu_threads = 1}, &note);
  ASSERT_TRUE(b.ok()) << b.status();
  if ((*b)->Name() == "cpu") {
    EXPECT_THAT(note, HasSubstr("backend auto: using cpu ("));
    EXPECT_THAT(note, HasSubstr(KERNELSERVE_HAVE_CUDA ? "cuda: no CUDA device" : "cuda: this build has no CUDA"));
    EXPECT_THAT(note, HasSubstr("hip: this build has no HIP (AMD) backend"));
  } else {
    EXPECT_EQ(note, "backend auto: using " + (*b)->Name());
  }
}

TEST(BackendsTest, UnknownNameIsInvalidArgument) {
  auto b = CreateBackend("tpu", {});
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(b.status().message(), "backend: expected auto, cpu, cuda or hip, got \"tpu\"");
}

}  // namespace
}  // namespace kernelserve
