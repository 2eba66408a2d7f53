// One worker thread per device with a bounded queue (DESIGN §5). Every call
// that touches a device (kernels, copies, allocations) runs through its
// worker, one at a time and in arrival order, so a backend never sees two
// threads on one device at once. A call that allows it runs on its own thread
// when the device is idle (Placement::kInlineWhenIdle): the two thread
// hand-offs of a queued call (wake the worker, wake the caller) cost more
// than a tiny kernel on a loaded machine.
#ifndef KERNELSERVE_SERVER_DEVICE_WORKER_H_
#define KERNELSERVE_SERVER_DEVICE_WORKER_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/server_context.h"

namespace kernelserve {

struct TaskTiming {
  double queue_ms = 0;  // submit to start
  double run_ms = 0;    // start to end
};

struct WorkerStats {
  int64_t completed = 0;          // tasks that ran
  int64_t rejected_full = 0;      // RESOURCE_EXHAUSTED at submit
  int64_t dropped_deadline = 0;   // deadline passed while queued
  int64_t dropped_cancelled = 0;  // client cancelled while queued
  int running = 0;                // tasks running now (0 or 1)
};

class DeviceWorker {
 public:
  enum class Placement {
    kWorker,          // always on the worker thread
    kInlineWhenIdle,  // on the calling thread when nothing runs or waits
  };

  DeviceWorker(int device, int queue_capacity);
  ~DeviceWorker();  // Stop()s
  DeviceWorker(const DeviceWorker&) = delete;
  DeviceWorker& operator=(const DeviceWorker&) = delete;

  // Runs `fn` on the worker thread and waits for it. RESOURCE_EXHAUSTED when
  // `queue_capacity` tasks are already waiting; DEADLINE_EXCEEDED when the
  // call (`ctx`, may be null) expired before its turn, CANCELLED when it was
  // cancelled while it waited behind other work (1 ms or more);
  // UNAVAILABLE once stopped. Otherwise fn's status.
  absl::Status Run(grpc::ServerContext* ctx, std::function<absl::Status()> fn,
                   TaskTiming* timing = nullptr, Placement placement = Placement::kWorker);

  // Refuses new tasks, lets the queued and running ones finish, joins the thread.
  void Stop();

  int device() const { return device_; }
  int queue_capacity() const { return capacity_; }
  int queue_depth() const;  // waiting plus running
  WorkerStats stats() const;

 private:
  struct Task;
  void Loop();
  // Runs a task taken off the queue (`queued`) or claimed inline
  // (running_task_ set), then clears running_task_ and counts it.
  void Execute(Task& task, bool queued);

  const int device_;
  const int capacity_;
  mutable absl::Mutex mu_;
  std::deque<std::shared_ptr<Task>> queue_ ABSL_GUARDED_BY(mu_);
  bool running_task_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  WorkerStats stats_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_DEVICE_WORKER_H_
