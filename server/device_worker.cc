#include "server/device_worker.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"

namespace kernelserve {
namespace {

// A queued task that waited at least this long is asked whether its call was
// cancelled meanwhile (DeviceWorker::Execute).
constexpr absl::Duration kCancelCheckAfter = absl::Milliseconds(1);

}  // namespace

struct DeviceWorker::Task {
  grpc::ServerContext* ctx = nullptr;
  std::function<absl::Status()> fn;
  absl::Time submitted;
  TaskTiming timing;
  absl::Status status;
  absl::Notification done;
};

DeviceWorker::DeviceWorker(int device, int queue_capacity)
    : device_(device), capacity_(queue_capacity < 1 ? 1 : queue_capacity) {
  thread_ = std::thread([this] { Loop(); });
}

DeviceWorker::~DeviceWorker() { Stop(); }

void DeviceWorker::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

int DeviceWorker::queue_depth() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(queue_.size()) + (running_task_ ? 1 : 0);
}

WorkerStats DeviceWorker::stats() const {
  absl::MutexLock lock(&mu_);
  WorkerStats st = stats_;
  st.running = running_task_ ? 1 : 0;
  return st;
}

absl::Status DeviceWorker::Run(grpc::ServerContext* ctx, std::function<absl::Status()> fn,
                               TaskTiming* timing, Placement placement) {
  auto task = std::make_shared<Task>();
  task->ctx = ctx;
  task->fn = std::move(fn);
  task->submitted = absl::Now();
  bool run_here = false;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      return absl::UnavailableError(absl::StrCat("device ", device_, " worker is shutting down"));
    }
    // Nothing runs and nothing waits: running here keeps the order and the
    // one-at-a-time rule, and skips both hand-offs.
    if (placement == Placement::kInlineWhenIdle && !running_task_ && queue_.empty()) {
      running_task_ = true;
      run_here = true;
    } else if (static_cast<int>(queue_.size()) >= capacity_) {
      ++stats_.rejected_full;
      return absl::ResourceExhaustedError(
          absl::StrCat("device ", device_, " queue is full (", queue_.size(), " queued)"));
    } else {
      queue_.push_back(task);
    }
  }
  if (run_here) {
    Execute(*task, /*queued=*/false);
  } else {
    task->done.WaitForNotification();
  }
  if (timing != nullptr) *timing = task->timing;
  return task->status;
}

void DeviceWorker::Loop() {
  for (;;) {
    std::shared_ptr<Task> task;
    {
      absl::MutexLock lock(&mu_);
      // Not while a task runs inline: one task at a time on the device.
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !running_task_ && (stopping_ || !queue_.empty());
      };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // stopping with nothing left
      task = std::move(queue_.front());
      queue_.pop_front();
      running_task_ = true;
    }
    Execute(*task, /*queued=*/true);
    task->done.Notify();
  }
}

void DeviceWorker::Execute(Task& task, bool queued) {
  const absl::Time start = absl::Now();
  task.timing.queue_ms = absl::ToDoubleMilliseconds(start - task.submitted);
  bool dropped_deadline = false, dropped_cancelled = false;
  if (task.ctx != nullptr) {
    // Deadline first: gRPC also marks an expired call cancelled. Cancellation
    // is asked only of a task that waited in the queue behind another one:
    // on the synchronous API IsCancelled() polls the call's completion
    // queue, 30-45 us of a small call (bench/NOTES.md, 2026-12-06), while a
    // task taken straight off an idle worker, like one run inline, left its
    // handler moments ago.
    if (task.ctx->deadline() <= std::chrono::system_clock::now()) {
      dropped_deadline = true;
    } else if (queued && start - task.submitted >= kCancelCheckAfter && task.ctx->IsCancelled()) {
      dropped_cancelled = true;
    }
  }
  if (dropped_cancelled) {
    task.status =
        absl::CancelledError(absl::StrCat("call cancelled while queued for device ", device_, "; not run"));
  } else if (dropped_deadline) {
    task.status = absl::DeadlineExceededError(absl::StrCat(
        "deadline passed after ", task.timing.queue_ms, " ms queued for device ", device_, "; not run"));
  } else {
    task.status = task.fn();
  }
  task.fn = nullptr;  // release captures here, not on the waiting thread
  task.timing.run_ms = absl::ToDoubleMilliseconds(absl::Now() - start);
  absl::MutexLock lock(&mu_);
  running_task_ = false;
  if (dropped_cancelled) {
    ++stats_.dropped_cancelled;
  } else if (dropped_deadline) {
    ++stats_.dropped_deadline;
  } else {
    ++stats_.completed;
  }
}

}  // namespace kernelserve
