#include "server/call_threads.h"

#include <utility>

namespace kernelserve {

CallThreads::CallThreads(int keep_idle, absl::Duration idle_exit)
    : keep_idle_(keep_idle < 0 ? 0 : keep_idle), idle_exit_(idle_exit) {}

CallThreads::~CallThreads() {
  std::map<int, std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    threads.swap(threads_);
  }
  for (auto& [id, t] : threads) t.join();
}

void CallThreads::Schedule(std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  JoinExited();
  work_.push_back(std::move(fn));
  // Every waiting closure has a thread of its own: an idle one, or a new one.
  if (static_cast<int>(work_.size()) <= idle_) return;
  const int id = next_id_++;
  threads_.emplace(id, std::thread([this, id] { Loop(id); }));
}

int CallThreads::threads() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(threads_.size() - exited_.size());
}

void CallThreads::JoinExited() {
  // A thread in exited_ has left Loop's last critical section: join is short.
  for (int id : exited_) {
    auto it = threads_.find(id);
    it->second.join();
    threads_.erase(it);
  }
  exited_.clear();
}

void CallThreads::Loop(int id) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !work_.empty(); };
  for (;;) {
    ++idle_;
    const bool woke = mu_.AwaitWithTimeout(absl::Condition(&ready), idle_exit_);
    --idle_;
    if (work_.empty()) {
      // Stopping, or idle for idle_exit_ with enough others idle.
      if (stopping_ || (!woke && idle_ >= keep_idle_)) break;
      continue;
    }
    std::function<void()> fn = std::move(work_.front());
    work_.pop_front();
    mu_.Unlock();
    fn();
    fn = nullptr;  // the closure's captures go here, not under the lock
    mu_.Lock();
  }
  if (!stopping_) exited_.push_back(id);
}

}  // namespace kernelserve
