// A small Prometheus registry: counters, gauges and histograms with labels,
// rendered in the text exposition format 0.0.4 (DESIGN §5, deploy/METRICS.md).
//
// Families are declared once with their help text; series are created on
// first use. Gauges that mirror server state (queue depth, memory per tenant)
// are refreshed by collectors that run at each scrape, so the hot path only
// touches counters and histograms.
#ifndef KERNELSERVE_SERVER_METRICS_METRICS_H_
#define KERNELSERVE_SERVER_METRICS_METRICS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace kernelserve {
namespace metrics {

using Labels = std::vector<std::pair<std::string, std::string>>;

// Latency buckets in seconds: 50 µs to 2 min.
std::vector<double> LatencyBuckets();

class Registry {
 public:
  enum class Type { kCounter, kGauge, kHistogram };

  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Re-declaring the same name with the same type is a no-op.
  void DeclareCounter(const std::string& name, const std::string& help);
  void DeclareGauge(const std::string& name, const std::string& help);
  void DeclareHistogram(const std::string& name, const std::string& help,
                        std::vector<double> upper_bounds);

  // Undeclared names and type mismatches are ignored (never crash a call).
  void Inc(absl::string_view name, const Labels& labels, double delta = 1);
  void Set(absl::string_view name, const Labels& labels, double value);
  void Add(absl::string_view name, const Labels& labels, double delta);  // gauges
  // Raises a counter to `total` (a running total kept elsewhere); never lowers it.
  void SetCounter(absl::string_view name, const Labels& labels, double total);
  void Observe(absl::string_view name, const Labels& labels, double value);
  // Hot-path forms taking a label set already rendered by RenderLabels().
  void IncRendered(absl::string_view name, const std::string& key, double delta = 1);
  void AddRendered(absl::string_view name, const std::string& key, double delta);
  void ObserveRendered(absl::string_view name, const std::string& key, double value);
  // Drops every series of a family (gauges whose label sets come and go).
  void Clear(absl::string_view name);

  // Run at each Render(), in order, before the text is built.
  void AddCollector(std::function<void(Registry*)> collector);

  std::string Render();

  // Test helpers: the value of a counter/gauge series, or a histogram's count
  // (-1 when absent).
  double Value(absl::string_view name, const Labels& labels) const;
  double HistogramCount(absl::string_view name, const Labels& labels) const;

 private:
  struct Series {
    double value = 0;              // counter, gauge; histogram sum
    std::vector<uint64_t> counts;  // histogram: per bucket, non-cumulative, +Inf last
    uint64_t count = 0;
  };
  struct Family {
    Type type;
    std::string help;
    std::vector<double> bounds;
    std::map<std::string, Series> series;  // key: rendered label set "{a=\"b\"}"
  };
  void Declare(const std::string& name, Type type, const std::string& help,
               std::vector<double> bounds);
  Family* Find(absl::string_view name, Type type) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::map<std::string, Family, std::less<>> families_ ABSL_GUARDED_BY(mu_);
  absl::Mutex collectors_mu_;
  std::vector<std::function<void(Registry*)>> collectors_ ABSL_GUARDED_BY(collectors_mu_);
};

// `{a="x",b="y"}` with values escaped; "" for no labels.
std::string RenderLabels(const Labels& labels);

// process_resident_memory_bytes, process_open_fds, process_start_time_seconds,
// process_cpu_seconds_total from /proc/self.
void AddProcessCollector(Registry* registry);
// Resident set size from /proc/self/statm (0 if unreadable).
int64_t ResidentMemoryBytes();

}  // namespace metrics
}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_METRICS_METRICS_H_
