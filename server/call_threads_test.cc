#include "server/call_threads.h"

#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace kernelserve {
namespace {

// Closures that each wait until all of them run at once: they finish only
// if every one got a thread of its own.
TEST(CallThreadsTest, EveryWaitingClosureHasItsOwnThread) {
  constexpr int kClosures = 8;
  absl::Mutex mu;
  int started = 0, finished = 0;
  {
    CallThreads pool;
    for (int i = 0; i < kClosures; ++i) {
      pool.Schedule([&] {
        absl::MutexLock lock(&mu);
        ++started;
        auto all = [&] { return started == kClosures; };
        EXPECT_TRUE(mu.AwaitWithTimeout(absl::Condition(&all), absl::Seconds(30)));
        ++finished;
      });
    }
    absl::MutexLock lock(&mu);
    auto done = [&] { return finished == kClosures; };
    EXPECT_TRUE(mu.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(30)));
    EXPECT_EQ(pool.threads(), kClosures);
  }
  EXPECT_EQ(finished, kClosures);
}

TEST(CallThreadsTest, ClosuresRunOffTheCallersThreadAndAThreadIsReused) {
  CallThreads pool;
  const std::thread::id caller = std::this_thread::get_id();
  for (int i = 0; i < 3; ++i) {
    absl::Notification ran;
    std::thread::id where;
    pool.Schedule([&] {
      where = std::this_thread::get_id();
      ran.Notify();
    });
    ASSERT_TRUE(ran.WaitForNotificationWithTimeout(absl::Seconds(30)));
    EXPECT_NE(where, caller);
  }
  // Each closure finished before the next came; a thread may still be between
  // its closure and its wait, so at most two.
  EXPECT_LE(pool.threads(), 2);
}

TEST(CallThreadsTest, DestructionRunsWhatWasScheduled) {
  absl::Mutex mu;
  int ran = 0;
  {
    CallThreads pool;
    for (int i = 0; i < 5; ++i) {
      pool.Schedule([&] {
        absl::SleepFor(absl::Milliseconds(20));
        absl::MutexLock lock(&mu);
        ++ran;
      });
    }
  }
  absl::MutexLock lock(&mu);
  EXPECT_EQ(ran, 5);
}

TEST(CallThreadsTest, IdleThreadsBeyondKeepIdleEnd) {
  CallThreads pool(/*keep_idle=*/1, /*idle_exit=*/absl::Milliseconds(50));
  absl::Mutex mu;
  int started = 0;
  bool release = false;
  for (int i = 0; i < 4; ++i) {
    pool.Schedule([&] {
      absl::MutexLock lock(&mu);
      ++started;
      mu.Await(absl::Condition(&release));
    });
  }
  {
    absl::MutexLock lock(&mu);
    auto all = [&] { return started == 4; };
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&all), absl::Seconds(30)));
    EXPECT_EQ(pool.threads(), 4);
    release = true;
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (pool.threads() > 1 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(pool.threads(), 1);
  // The pool still runs work after its threads ended (and joins them).
  absl::Notification ran;
  pool.Schedule([&] { ran.Notify(); });
  EXPECT_TRUE(ran.WaitForNotificationWithTimeout(absl::Seconds(30)));
}

}  // namespace
}  // namespace kernelserve
