// Test helper: another tenant's kernel calls, in a loop on a thread of
// their own until Stop(), counting how many ran and how many failed or came
// back wrong (the server's own attention against the fp64 oracle). The
// user-kernel tests run them beside a misbehaving kernel's job.
#ifndef KERNELSERVE_SERVER_USER_KERNELS_BACKGROUND_CALLS_H_
#define KERNELSERVE_SERVER_USER_KERNELS_BACKGROUND_CALLS_H_

#include <atomic>
#include <string>
#include <thread>

#include "client/client.h"
#include "kernels/numerics/test_inputs.h"

namespace kernelserve {

class BackgroundCalls {
 public:
  // `shape`: q, k and v, [batch, heads, seq, head_dim].
  BackgroundCalls(Client* client, const Shape& shape) : thread_([this, client, shape] { Loop(client, shape); }) {}
  ~BackgroundCalls() { Stop(); }
  BackgroundCalls(const BackgroundCalls&) = delete;
  BackgroundCalls& operator=(const BackgroundCalls&) = delete;

  void Stop() {
    done_ = true;
    if (thread_.joinable()) thread_.join();
  }
  int calls() const { return calls_.load(); }
  int failures() const { return failures_.load(); }
  // The first failure's status or error (empty while none); read after Stop().
  const std::string& first_failure() const { return first_failure_; }

 private:
  void Loop(Client* client, const Shape& shape) {
    const HostTensor q = numerics::GaussianBf16(shape, 1), k = numerics::GaussianBf16(shape, 2),
                     v = numerics::GaussianBf16(shape, 3);
    while (!done_.load()) {
      AttentionArgs args;
      args.q = q;
      args.k = k;
      args.v = v;
      args.causal = true;
      args.report_error = true;
      auto r = client->Attention(args);
      ++calls_;
      const bool ok = r.ok() && r->error.has_value() && r->error->rel_rms < 0.01;
      if (!ok && failures_++ == 0) {
        first_failure_ = !r.ok() ? r.status().ToString()
                         : r->error.has_value() ? "rel_rms " + std::to_string(r->error->rel_rms)
                                                : "no error reported";
      }
    }
  }

  std::atomic<bool> done_{false};
  std::atomic<int> calls_{0}, failures_{0};
  std::string first_failure_;
  std::thread thread_;  // last: starts once the counters exist
};

}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_USER_KERNELS_BACKGROUND_CALLS_H_
