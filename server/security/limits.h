// Per-tenant limits (DESIGN §5): device memory for buffers, pools and
// benchmark jobs, queued and running jobs, request rate, concurrent streams.
// Every refusal is RESOURCE_EXHAUSTED naming the limit, the tenant and the
// numbers, e.g.
//   tenant "alice" over limit max_concurrent_streams: 4 in use, limit 4
// max_running_jobs refuses nothing: a job over it waits in the queue.
//
// Limits come from flags (the defaults for every tenant) and an optional
// limits file, one tenant per line, keys as in TenantLimits, 0 = unlimited:
//
//   # tenant  key=value ...          ("*" sets the defaults for everyone)
//   *         max_device_memory=16GiB requests_per_second=200
//   alice     max_device_memory=64GiB max_running_jobs=2 max_queued_jobs=20
//   ci        requests_per_second=50 request_burst=100 max_concurrent_streams=8
#ifndef KERNELSERVE_SERVER_SECURITY_LIMITS_H_
#define KERNELSERVE_SERVER_SECURITY_LIMITS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/security/tokens.h"

namespace kernelserve {
namespace security {

struct TenantLimits {
  int64_t max_device_memory = 0;      // bytes of buffers + pools, all devices
  int64_t max_queued_jobs = 0;        // benchmark jobs waiting
  int64_t max_running_jobs = 0;       // benchmark jobs running
  double requests_per_second = 0;     // token bucket refill rate
  int64_t request_burst = 0;          // bucket size; 0: max(1, requests_per_second)
  int64_t max_concurrent_streams = 0; // open streaming calls (uploads, downloads, watches)
};

struct LimitsConfig {
  TenantLimits defaults;
  std::map<std::string, TenantLimits> per_tenant;  // complete records (defaults merged in)
  const TenantLimits& For(const std::string& tenant) const;
};

// Parses a limits file on top of `defaults`. Sizes take K/M/G/T and KiB/MiB/GiB/TiB suffixes.
absl::StatusOr<LimitsConfig> ParseLimitsFile(absl::string_view text, absl::string_view source,
                                             const TenantLimits& defaults);
absl::StatusOr<LimitsConfig> LoadLimitsFile(const std::string& path, const TenantLimits& defaults);

class TenantLimiter {
 public:
  using Clock = std::function<absl::Time()>;
  explicit TenantLimiter(LimitsConfig config, Clock clock = [] { return absl::Now(); });

  const TenantLimits& LimitsFor(const Tenant& tenant) const { return config_.For(tenant.name); }

  // Takes one request from the tenant's bucket.
  absl::Status AdmitRequest(const Tenant& tenant);

  // Holds one of the tenant's concurrent-stream slots until destroyed.
  class StreamSlot {
   public:
    StreamSlot() = default;
    StreamSlot(StreamSlot&& o) noexcept : owner_(o.owner_), tenant_(std::move(o.tenant_)) {
      o.owner_ = nullptr;
    }
    StreamSlot& operator=(StreamSlot&& o) noexcept;
    StreamSlot(const StreamSlot&) = delete;
    StreamSlot& operator=(const StreamSlot&) = delete;
    ~StreamSlot();

   private:
    friend class TenantLimiter;
    TenantLimiter* owner_ = nullptr;
    std::string tenant_;
  };
  absl::StatusOr<StreamSlot> AcquireStream(const Tenant& tenant);
  int64_t open_streams(const std::string& tenant) const;

  // `in_use` bytes the tenant holds now, `more` it asks for.
  absl::Status CheckMemory(const Tenant& tenant, int64_t in_use, int64_t more) const;
  // Before queueing one more job: the tenant's jobs now queued and running.
  absl::Status CheckSubmitJob(const Tenant& tenant, int64_t queued) const;
  // Before starting a queued job: the tenant's jobs running now. Not OK
  // (RESOURCE_EXHAUSTED naming max_running_jobs) means the job waits in the
  // queue, which the scheduler reports to its watchers; nothing is refused,
  // so it is not counted in rejections().
  absl::Status CheckStartJob(const Tenant& tenant, int64_t running) const;

  // Requests refused so far by limit name (for metrics): max_device_memory,
  // requests_per_second, max_concurrent_streams, max_queued_jobs.
  std::map<std::string, int64_t> rejections() const;

 private:
  struct Bucket {
    double tokens = 0;
    absl::Time last;
    bool init = false;
  };
  absl::Status Exhausted(const Tenant& tenant, absl::string_view limit, double used,
                         double limit_value) const;
  void ReleaseStream(const std::string& tenant);

  LimitsConfig config_;
  Clock clock_;
  mutable absl::Mutex mu_;
  std::map<std::string, Bucket> buckets_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> streams_ ABSL_GUARDED_BY(mu_);
  mutable std::map<std::string, int64_t> rejections_ ABSL_GUARDED_BY(mu_);
};

}  // namespace security
}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_SECURITY_LIMITS_H_
