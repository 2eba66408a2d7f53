// The device health probe (device_probe.h): an operator's command sees its
// device and backend and is judged by its exit code within the timeout; the
// worker's own --probe runs on the cpu backend; a missing worker is a clear
// FAILED_PRECONDITION.
#include "server/user_kernels/device_probe.h"

#include <chrono>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/user_kernels/worker_client.h"

namespace kernelserve {
namespace user_kernels {
namespace {

using ::testing::HasSubstr;

UserKernelOptions Options(const std::string& command) {
  UserKernelOptions o;
  o.work_dir = ::testing::TempDir();
  o.health_probe = command;
  o.worker = "server/user_kernels/kernel_worker";
  return o;
}

TEST(DeviceProbeTest, CommandSeesItsDeviceAndBackend) {
  const UserKernelOptions o = Options("test \"$KERNELSERVE_DEVICE\" != 1 && test \"$KERNELSERVE_BACKEND\" = cpu");
  EXPECT_TRUE(ProbeDevice(o, "cpu", 0).ok());
  EXPECT_TRUE(ProbeDevice(o, "cpu", 2).ok());
  const absl::Status sick = ProbeDevice(o, "cpu", 1);
  EXPECT_EQ(sick.code(), absl::StatusCode::kUnavailable) << sick;
  EXPECT_THAT(sick.message(), HasSubstr("--user_kernel_health_probe"));
  EXPECT_THAT(sick.message(), HasSubstr("device 1 failed (exit code 1)"));
  EXPECT_FALSE(ProbeDevice(o, "cuda", 0).ok());
}

TEST(DeviceProbeTest, FailureCarriesTheCommandsOutput) {
  const absl::Status st = ProbeDevice(Options("echo 'uncorrectable ECC errors: 12' >&2; exit 4"), "cpu", 0);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(st.message(), HasSubstr("exit code 4"));
  EXPECT_THAT(st.message(), HasSubstr("its output ends: uncorrectable ECC errors: 12"));
}

TEST(DeviceProbeTest, AHangingProbeFailsAtItsTimeout) {
  UserKernelOptions o = Options("sleep 60");
  o.health_probe_timeout_s = 0.5;
  const auto t0 = std::chrono::steady_clock::now();
  const absl::Status st = ProbeDevice(o, "cpu", 0);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(st.message(), HasSubstr("did not finish within 0.5 s"));
  EXPECT_LT(s, 10);
}

TEST(DeviceProbeTest, AProbeKilledByASignalFails) {
  const absl::Status st = ProbeDevice(Options("kill -SEGV $$"), "cpu", 0);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(st.message(), HasSubstr("SIGSEGV"));
}

TEST(DeviceProbeTest, TheWorkersOwnProbePassesOnCpu) {
  const absl::Status st = ProbeDevice(Options(""), "cpu", 0);
  EXPECT_TRUE(st.ok()) << st;
}

TEST(DeviceProbeTest, AMissingWorkerIsNamed) {
  UserKernelOptions o = Options("");
  o.worker = "/nonexistent/kernel_worker";
  const absl::Status st = ProbeDevice(o, "cpu", 3);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("/nonexistent/kernel_worker is missing, so device 3 cannot be probed"));
}

TEST(DeviceProbeTest, OrdinaryFailuresAreNoWorkerFault) {
  EXPECT_EQ(WorkerFault(absl::AbortedError("user:x: the kernel returned 7 (0 is success)")), "");
  EXPECT_EQ(WorkerFault(absl::OkStatus()), "");
}

}  // namespace
}  // namespace user_kernels
}  // namespace kernelserve
