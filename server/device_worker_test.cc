#include "server/device_worker.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
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

using Placement = DeviceWorker::Placement;

TEST(DeviceWorkerTest, InlineWhenIdleRunsOnTheCallersThread) {
  DeviceWorker worker(0, 4);
  std::thread::id ran_on;
  TaskTiming timing;
  ASSERT_TRUE(worker.Run(nullptr, [&] {
                ran_on = std::this_thread::get_id();
                EXPECT_EQ(worker.queue_depth(), 1);  // counts as running
                return absl::OkStatus();
              }, &timing, Placement::kInlineWhenIdle).ok());
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_EQ(worker.stats().completed, 1);
  EXPECT_EQ(worker.queue_depth(), 0);
  EXPECT_GE(timing.queue_ms, 0);
  const absl::Status s = worker.Run(nullptr, [] { return absl::NotFoundError("buffer b1: no such buffer"); },
                                    nullptr, Placement::kInlineWhenIdle);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "buffer b1: no such buffer");
}

// While a task runs (inline or on the worker), an inline-allowed call waits
// its turn on the worker, after the ones queued before it; the worker never
// starts a queued task while an inline one runs.
TEST(DeviceWorkerTest, InlineCallsQueueBehindARunningTask) {
  DeviceWorker worker(0, 8);
  absl::Notification started, release;
  absl::Mutex mu;
  std::vector<int> order;
  int running = 0, max_running = 0;
  auto task = [&](int i) {
    return [&, i] {
      {
        absl::MutexLock lock(&mu);
        max_running = std::max(max_running, ++running);
        order.push_back(i);
      }
      if (i == 0) {
        started.Notify();
        release.WaitForNotification();
      }
      absl::MutexLock lock(&mu);
      --running;
      return absl::OkStatus();
    };
  };
  std::thread first([&] { EXPECT_TRUE(worker.Run(nullptr, task(0), nullptr, Placement::kInlineWhenIdle).ok()); });
  started.WaitForNotification();
  std::vector<std::thread> later;
  std::vector<std::thread::id> ids(3);
  for (int i = 1; i <= 3; ++i) {
    later.emplace_back([&, i] {
      EXPECT_TRUE(worker.Run(nullptr, task(i), nullptr, i == 2 ? Placement::kWorker : Placement::kInlineWhenIdle).ok());
    });
    while (worker.queue_depth() < i + 1) absl::SleepFor(absl::Milliseconds(1));
  }
  release.Notify();
  first.join();
  for (auto& t : later) t.join();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(max_running, 1);
  EXPECT_EQ(worker.stats().completed, 4);
}

TEST(DeviceWorkerTest, StopWaitsForAnInlineTask) {
  DeviceWorker worker(0, 2);
  absl::Notification started, release;
  bool finished = false;
  std::thread caller([&] {
    EXPECT_TRUE(worker.Run(nullptr, [&] {
                  started.Notify();
                  release.WaitForNotification();
                  finished = true;
                  return absl::OkStatus();
                }, nullptr, Placement::kInlineWhenIdle).ok());
  });
  started.WaitForNotification();
  std::atomic<bool> stopped{false};
  std::thread stopper([&] {
    worker.Stop();
    stopped = true;
  });
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(stopped);  // the inline task still holds the device
  release.Notify();
  stopper.join();
  EXPECT_TRUE(finished);
  EXPECT_EQ(worker.stats().completed, 1);
  caller.join();
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
