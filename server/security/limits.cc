#include "server/security/limits.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace kernelserve {
namespace security {
namespace {

absl::StatusOr<int64_t> ParseSize(absl::string_view v) {
  static const struct {
    const char* suffix;
    int64_t mult;
  } kSuffixes[] = {{"TiB", int64_t{1} << 40}, {"GiB", int64_t{1} << 30}, {"MiB", int64_t{1} << 20},
                   {"KiB", int64_t{1} << 10}, {"T", 1000000000000}, {"G", 1000000000},
                   {"M", 1000000}, {"K", 1000}};
  int64_t mult = 1;
  for (const auto& s : kSuffixes) {
    if (absl::EndsWith(v, s.suffix)) {
      v.remove_suffix(strlen(s.suffix));
      mult = s.mult;
      break;
    }
  }
  int64_t n = 0;
  if (!absl::SimpleAtoi(v, &n) || n < 0 || (n > 0 && n > INT64_MAX / mult)) {
    return absl::InvalidArgumentError("not a non-negative size");
  }
  return n * mult;
}

absl::Status SetKey(TenantLimits* l, absl::string_view key, absl::string_view value) {
  auto as_int = [&](int64_t* out) -> absl::Status {
    auto v = ParseSize(value);
    if (!v.ok()) return v.status();
    *out = *v;
    return absl::OkStatus();
  };
  if (key == "max_device_memory") return as_int(&l->max_device_memory);
  if (key == "max_queued_jobs") return as_int(&l->max_queued_jobs);
  if (key == "max_running_jobs") return as_int(&l->max_running_jobs);
  if (key == "request_burst") return as_int(&l->request_burst);
  if (key == "max_concurrent_streams") return as_int(&l->max_concurrent_streams);
  if (key == "requests_per_second") {
    double d = 0;
    if (!absl::SimpleAtod(value, &d) || !(d >= 0)) {
      return absl::InvalidArgumentError("not a non-negative rate");
    }
    l->requests_per_second = d;
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown key \"", key, "\""));
}

}  // namespace

const TenantLimits& LimitsConfig::For(const std::string& tenant) const {
  auto it = per_tenant.find(tenant);
  return it == per_tenant.end() ? defaults : it->second;
}

absl::StatusOr<LimitsConfig> ParseLimitsFile(absl::string_view text, absl::string_view source,
                                             const TenantLimits& defaults) {
  LimitsConfig config;
  config.defaults = defaults;
  // Two passes so "*" applies to tenants listed before it too.
  struct Line {
    int no;
    std::string tenant;
    std::vector<std::pair<std::string, std::string>> kv;
  };
  std::vector<Line> lines;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    const size_t hash = line.find('#');
    if (hash != absl::string_view::npos) line = line.substr(0, hash);
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (fields.empty()) continue;
    Line l;
    l.no = line_no;
    l.tenant = std::string(fields[0]);
    if (l.tenant != "*" && !IsValidTenantName(l.tenant)) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ":", line_no, ": tenant name must be \"*\" or 1..64 of [A-Za-z0-9_.-]"));
    }
    for (size_t i = 1; i < fields.size(); ++i) {
      std::pair<std::string, std::string> kv = absl::StrSplit(fields[i], absl::MaxSplits('=', 1));
      l.kv.push_back(std::move(kv));
    }
    lines.push_back(std::move(l));
  }
  for (int pass = 0; pass < 2; ++pass) {
    for (const Line& l : lines) {
      if ((l.tenant == "*") != (pass == 0)) continue;
      TenantLimits* target;
      if (pass == 0) {
        target = &config.defaults;
      } else {
        auto it = config.per_tenant.find(l.tenant);
        if (it == config.per_tenant.end()) it = config.per_tenant.emplace(l.tenant, config.defaults).first;
        target = &it->second;
      }
      for (const auto& [key, value] : l.kv) {
        absl::Status s = SetKey(target, key, value);
        if (!s.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat(source, ":", l.no, ": ", key, "=", value, ": ", s.message()));
        }
      }
    }
  }
  return config;
}

absl::StatusOr<LimitsConfig> LoadLimitsFile(const std::string& path, const TenantLimits& defaults) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("limits file ", path, ": cannot open"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseLimitsFile(ss.str(), path, defaults);
}

TenantLimiter::TenantLimiter(LimitsConfig config, Clock clock)
    : config_(std::move(config)), clock_(std::move(clock)) {}

absl::Status TenantLimiter::Exhausted(const Tenant& tenant, absl::string_view limit, double used,
                                      double limit_value) const {
  {
    absl::MutexLock lock(&mu_);
    ++rejections_[std::string(limit)];
  }
  return absl::ResourceExhaustedError(absl::StrFormat(
      "tenant \"%s\" over limit %s: %g in use, limit %g", tenant.name, limit, used, limit_value));
}

absl::Status TenantLimiter::AdmitRequest(const Tenant& tenant) {
  const TenantLimits& l = LimitsFor(tenant);
  if (l.requests_per_second <= 0) return absl::OkStatus();
  const double burst = l.request_burst > 0 ? static_cast<double>(l.request_burst)
                                           : std::max(1.0, l.requests_per_second);
  const absl::Time now = clock_();
  {
    absl::MutexLock lock(&mu_);
    Bucket& b = buckets_[tenant.name];
    if (!b.init) {
      b.init = true;
      b.tokens = burst;
      b.last = now;
    }
    const double dt = std::max(0.0, absl::ToDoubleSeconds(now - b.last));
    b.tokens = std::min(burst, b.tokens + dt * l.requests_per_second);
    b.last = now;
    if (b.tokens >= 1.0) {
      b.tokens -= 1.0;
      return absl::OkStatus();
    }
  }
  absl::MutexLock lock(&mu_);
  ++rejections_["requests_per_second"];
  return absl::ResourceExhaustedError(absl::StrFormat(
      "tenant \"%s\" over limit requests_per_second: %g per second (burst %g); retry later",
      tenant.name, l.requests_per_second, burst));
}

TenantLimiter::StreamSlot& TenantLimiter::StreamSlot::operator=(StreamSlot&& o) noexcept {
  if (this != &o) {
    if (owner_ != nullptr) owner_->ReleaseStream(tenant_);
    owner_ = o.owner_;
    tenant_ = std::move(o.tenant_);
    o.owner_ = nullptr;
  }
  return *this;
}

TenantLimiter::StreamSlot::~StreamSlot() {
  if (owner_ != nullptr) owner_->ReleaseStream(tenant_);
}

absl::StatusOr<TenantLimiter::StreamSlot> TenantLimiter::AcquireStream(const Tenant& tenant) {
  const TenantLimits& l = LimitsFor(tenant);
  int64_t open = 0;
  {
    absl::MutexLock lock(&mu_);
    int64_t& n = streams_[tenant.name];
    if (l.max_concurrent_streams <= 0 || n < l.max_concurrent_streams) {
      ++n;
      StreamSlot slot;
      slot.owner_ = this;
      slot.tenant_ = tenant.name;
      return slot;
    }
    open = n;
  }
  return Exhausted(tenant, "max_concurrent_streams", static_cast<double>(open),
                   static_cast<double>(l.max_concurrent_streams));
}

void TenantLimiter::ReleaseStream(const std::string& tenant) {
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(tenant);
  if (it != streams_.end() && --it->second <= 0) streams_.erase(it);
}

int64_t TenantLimiter::open_streams(const std::string& tenant) const {
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(tenant);
  return it == streams_.end() ? 0 : it->second;
}

absl::Status TenantLimiter::CheckMemory(const Tenant& tenant, int64_t in_use, int64_t more) const {
  const TenantLimits& l = LimitsFor(tenant);
  if (l.max_device_memory <= 0 || in_use + more <= l.max_device_memory) return absl::OkStatus();
  {
    absl::MutexLock lock(&mu_);
    ++rejections_["max_device_memory"];
  }
  return absl::ResourceExhaustedError(absl::StrFormat(
      "tenant \"%s\" over limit max_device_memory: %d bytes in use + %d requested > limit %d bytes",
      tenant.name, in_use, more, l.max_device_memory));
}

absl::Status TenantLimiter::CheckSubmitJob(const Tenant& tenant, int64_t queued) const {
  const TenantLimits& l = LimitsFor(tenant);
  if (l.max_queued_jobs <= 0 || queued < l.max_queued_jobs) return absl::OkStatus();
  return Exhausted(tenant, "max_queued_jobs", static_cast<double>(queued),
                   static_cast<double>(l.max_queued_jobs));
}

absl::Status TenantLimiter::CheckStartJob(const Tenant& tenant, int64_t running) const {
  const TenantLimits& l = LimitsFor(tenant);
  if (l.max_running_jobs <= 0 || running < l.max_running_jobs) return absl::OkStatus();
  // Not Exhausted(): the job is held, not refused, and the scheduler asks
  // again at every wake-up, so counting here would count nothing real.
  return absl::ResourceExhaustedError(absl::StrFormat(
      "tenant \"%s\" at limit max_running_jobs: %d running, limit %d", tenant.name, running,
      l.max_running_jobs));
}

std::map<std::string, int64_t> TenantLimiter::rejections() const {
  absl::MutexLock lock(&mu_);
  return rejections_;
}

}  // namespace security
}  // namespace kernelserve
