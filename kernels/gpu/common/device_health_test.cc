#include "kernels/gpu/common/device_health.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"

namespace kernelserve {
namespace gpu {
namespace {

struct FakeDevice {
  DeviceInfo info;
  DeviceHealth health;
};

std::vector<std::unique_ptr<FakeDevice>> TwoDevices() {
  std::vector<std::unique_ptr<FakeDevice>> devices;
  for (int i = 0; i < 2; ++i) {
    devices.push_back(std::make_unique<FakeDevice>());
    devices.back()->info.index = i;
    devices.back()->info.backend = "vendor";
    devices.back()->info.name = "card";
  }
  return devices;
}

TEST(DeviceHealthTest, HealthyUntilTheFirstFaultWhoseReasonStays) {
  auto devices = TwoDevices();
  auto d = HealthyDevice(devices, "vendor", 1);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*d, devices[1].get());
  EXPECT_TRUE(ReportDevice(devices, "vendor", 1).healthy);

  devices[1]->health.MarkUnhealthy("illegal address");
  devices[1]->health.MarkUnhealthy("launch failure");
  const DeviceInfo info = ReportDevice(devices, "vendor", 1);
  EXPECT_EQ(info.name, "card");
  EXPECT_FALSE(info.healthy);
  EXPECT_EQ(info.health_reason, "illegal address");
  d = HealthyDevice(devices, "vendor", 1);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(d.status().message(), "vendor device 1 is unhealthy: illegal address");
  // The other device is untouched.
  EXPECT_TRUE(HealthyDevice(devices, "vendor", 0).ok());
  EXPECT_TRUE(ReportDevice(devices, "vendor", 0).healthy);
}

TEST(DeviceHealthTest, AnIndexOutOfRangeIsRefused) {
  auto devices = TwoDevices();
  for (int bad : {-1, 2}) {
    auto d = HealthyDevice(devices, "vendor", bad, " on backend vendor");
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(d.status().message(),
              absl::StrCat("device: expected 0..1 on backend vendor, got ", bad));
    const DeviceInfo none = ReportDevice(devices, "vendor", bad);
    EXPECT_FALSE(none.healthy);
    EXPECT_EQ(none.health_reason, "no such device");
  }
  EXPECT_EQ(HealthyDevice(devices, "vendor", 5).status().message(), "device: expected 0..1, got 5");
}

}  // namespace
}  // namespace gpu
}  // namespace kernelserve
