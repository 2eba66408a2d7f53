#include "server/device_worker.h"

#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/status_mapping.h"

namespace kernelserve {
namespace {

TEST(DeviceWorkerTest, RunsEveryTaskOnOneThreadInOrder) {
  DeviceWorker worker(0, 8);
  std::vector<std::thread::id> ids;
  std::vector<int> order;
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(worker.Run(nullptr, [&, i] {
                  ids.push_back(std::this_thread::get_id());
                  order.push_back(i);
                  return absl::OkStatus();
                }).ok());
  }
  ASSERT_EQ(ids.size(), 5u);
  for (auto id : ids) EXPECT_EQ(id, ids[0]);
  EXPECT_NE(ids[0], std::this_thread::get_id());
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(worker.stats().completed, 5);
}

TEST(DeviceWorkerTest, TaskStatusComesBack) {
  DeviceWorker worker(0, 1);
  absl::Status s = worker.Run(nullptr, [] { return absl::InvalidArgumentError("q: bad"); });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "q: bad");
}

TEST(DeviceWorkerTest, FullQueueIsResourceExhausted) {
  DeviceWorker worker(0, 2);
  absl::Notification started, release;
  std::vector<std::thread> threads;
  threads.emplace_back([&] {
    EXPECT_TRUE(worker.Run(nullptr, [&] {
                  started.Notify();
                  release.WaitForNotification();
                  return absl::OkStatus();
                }).ok());
  });
  // Running, not merely queued: otherwise the next two could overfill the queue.
  started.WaitForNotification();
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&] { EXPECT_TRUE(worker.Run(nullptr, [] { return absl::OkStatus(); }).ok()); });
  }
  while (worker.queue_depth() < 3) absl::SleepFor(absl::Milliseconds(1));
  absl::Status s = worker.Run(nullptr, [] { return absl::OkStatus(); });
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "device 0 queue is full (2 queued)");
  release.Notify();
  for (auto& t : threads) t.join();
  EXPECT_EQ(worker.stats().completed, 3);
  EXPECT_EQ(worker.stats().rejected_full, 1);
  EXPECT_EQ(worker.queue_depth(), 0);
}

TEST(DeviceWorkerTest, StoppedWorkerIsUnavailable) {
  DeviceWorker worker(3, 4);
  worker.Stop();
  absl::Status s = worker.Run(nullptr, [] { return absl::OkStatus(); });
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
}

TEST(StatusMappingTest, EveryCodeMapsToTheSameNumberAndBack) {
  for (int c = 0; c <= 16; ++c) {
    const absl::Status s(static_cast<absl::StatusCode>(c), c == 0 ? "" : "msg");
    const grpc::Status g = ToGrpcStatus(s);
    EXPECT_EQ(static_cast<int>(g.error_code()), c);
    if (c != 0) {
      EXPECT_EQ(g.error_message(), "msg");
    }
    EXPECT_EQ(FromGrpcStatus(g), s);
  }
}

}  // namespace
}  // namespace kernelserve
