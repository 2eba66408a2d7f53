// Threads for gRPC callback handlers that must block. A callback-API handler
// runs on one of gRPC's few callback threads (2 on a 2-core machine); a call
// that waits there for a busy device holds that thread, and enough of them
// stall every callback method of the server. Such a call runs here instead,
// on a thread of its own: a finished thread waits for the next call, a new one
// starts when none waits (as many as calls block at once, like the synchronous
// API's thread manager), and threads idle for `idle_exit` beyond `keep_idle`
// of them end.
#ifndef KERNELSERVE_SERVER_CALL_THREADS_H_
#define KERNELSERVE_SERVER_CALL_THREADS_H_

#include <deque>
#include <functional>
#include <map>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace kernelserve {

class CallThreads {
 public:
  explicit CallThreads(int keep_idle = 2, absl::Duration idle_exit = absl::Seconds(10));
  ~CallThreads();  // runs what was scheduled, then joins every thread
  CallThreads(const CallThreads&) = delete;
  CallThreads& operator=(const CallThreads&) = delete;

  // Runs `fn` on a pool thread, never on the caller's; a new thread when no
  // thread is idle.
  void Schedule(std::function<void()> fn);

  int threads() const;  // alive now

 private:
  void Loop(int id);
  void JoinExited() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int keep_idle_;
  const absl::Duration idle_exit_;
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> work_ ABSL_GUARDED_BY(mu_);
  int idle_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int next_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<int, std::thread> threads_ ABSL_GUARDED_BY(mu_);
  std::vector<int> exited_ ABSL_GUARDED_BY(mu_);  // returned from Loop, not joined yet
};

}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_CALL_THREADS_H_
