#include "kernels/backends.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "local_config_cuda/config.h"
#include "local_config_hip/config.h"

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
  EXPECT_EQ(builds[2].built, KERNELSERVE_HAVE_HIP == 1);
  if (builds[2].built) {
    EXPECT_THAT(builds[2].note, HasSubstr("gfx942 code objects from "));
    EXPECT_THAT(builds[2].note, HasSubstr("the HIP runtime (libamdhip64) is loaded at start-up, not linked"));
  } else {
    EXPECT_THAT(builds[2].note, HasSubstr("this build has no HIP (AMD) backend ("));
  }
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

// No AMD GPU exists on these machines: with the backend built, `hip` fails
// to start, saying which runtime libraries it tried (no ROCm) or that the
// runtime found no device (ROCm's libamdhip64 without a GPU).
TEST(BackendsTest, HipFailsToStartSayingWhy) {
  std::string note;
  auto b = CreateBackend("hip", {}, &note);
  ASSERT_FALSE(b.ok()) << "an AMD GPU answers on a machine documented to have none";
  if (!KERNELSERVE_HAVE_HIP) {
    EXPECT_EQ(b.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(b.status().message(), HasSubstr("this build has no HIP (AMD) backend ("));
    return;
  }
  EXPECT_EQ(b.status().code(), absl::StatusCode::kUnavailable);
  const std::string m(b.status().message());
  if (m.find("cannot load the HIP runtime") == 0) {
    EXPECT_THAT(m, HasSubstr("tried libamdhip64.so ("));
    EXPECT_THAT(m, HasSubstr("; libamdhip64.so.6 ("));
    EXPECT_THAT(m, HasSubstr("; libamdhip64.so.5 ("));
  } else {
    EXPECT_THAT(m, ::testing::StartsWith("no HIP device: hipGetDeviceCount: "));
  }
  EXPECT_TRUE(note.empty());
}

TEST(BackendsTest, AutoSaysWhyItTookTheBackendItTook) {
  std::string note;
  auto b = CreateBackend("auto", {.cpu_threads = 1}, &note);
  ASSERT_TRUE(b.ok()) << b.status();
  if ((*b)->Name() == "cpu") {
    EXPECT_THAT(note, HasSubstr("backend auto: using cpu ("));
    EXPECT_THAT(note, HasSubstr(KERNELSERVE_HAVE_CUDA ? "cuda: no CUDA device" : "cuda: this build has no CUDA"));
    EXPECT_THAT(note, HasSubstr(KERNELSERVE_HAVE_HIP ? "; hip: " : "; hip: this build has no HIP (AMD) backend ("));
    if (KERNELSERVE_HAVE_HIP) {
      EXPECT_TRUE(note.find("hip: cannot load the HIP runtime") != std::string::npos ||
                  note.find("hip: no HIP device") != std::string::npos)
          << note;
    }
    // CUDA is tried before HIP.
    EXPECT_LT(note.find("cuda: "), note.find("; hip: "));
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
