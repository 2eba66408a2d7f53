#include "server/metrics/metrics.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace kernelserve {
namespace metrics {
namespace {

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return absl::StrCat(static_cast<int64_t>(v));
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

void EscapeInto(absl::string_view s, bool quote, std::string* out) {
  for (char c : s) {
    if (c == '\\') {
      out->append("\\\\");
    } else if (c == '\n') {
      out->append("\\n");
    } else if (c == '"' && quote) {
      out->append("\\\"");
    } else {
      out->push_back(c);
    }
  }
}

// Adds `extra` (e.g. le="0.1") inside an already rendered label set.
std::string WithLabel(const std::string& key, const std::string& extra) {
  if (key.empty()) return absl::StrCat("{", extra, "}");
  return absl::StrCat(key.substr(0, key.size() - 1), ",", extra, "}");
}

}  // namespace

std::vector<double> LatencyBuckets() {
  return {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
          0.05,    0.1,    0.25,    0.5,    1,     2.5,    5,     10,   30,  120};
}

std::string RenderLabels(const Labels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i > 0) out.push_back(',');
    out.append(labels[i].first);
    out.append("=\"");
    EscapeInto(labels[i].second, true, &out);
    out.push_back('"');
  }
  out.push_back('}');
  return out;
}

void Registry::Declare(const std::string& name, Type type, const std::string& help,
                       std::vector<double> bounds) {
  absl::MutexLock lock(&mu_);
  auto it = families_.find(name);
  if (it != families_.end()) return;
  Family f;
  f.type = type;
  f.help = help;
  f.bounds = std::move(bounds);
  families_.emplace(name, std::move(f));
}

void Registry::DeclareCounter(const std::string& name, const std::string& help) {
  Declare(name, Type::kCounter, help, {});
}
void Registry::DeclareGauge(const std::string& name, const std::string& help) {
  Declare(name, Type::kGauge, help, {});
}
void Registry::DeclareHistogram(const std::string& name, const std::string& help,
                                std::vector<double> upper_bounds) {
  Declare(name, Type::kHistogram, help, std::move(upper_bounds));
}

Registry::Family* Registry::Find(absl::string_view name, Type type) {
  auto it = families_.find(name);
  if (it == families_.end() || it->second.type != type) return nullptr;
  return &it->second;
}

void Registry::Inc(absl::string_view name, const Labels& labels, double delta) {
  IncRendered(name, RenderLabels(labels), delta);
}

void Registry::IncRendered(absl::string_view name, const std::string& key, double delta) {
  absl::MutexLock lock(&mu_);
  Family* f = Find(name, Type::kCounter);
  if (f == nullptr || !(delta >= 0)) return;
  f->series[key].value += delta;
}

void Registry::Set(absl::string_view name, const Labels& labels, double value) {
  const std::string key = RenderLabels(labels);
  absl::MutexLock lock(&mu_);
  Family* f = Find(name, Type::kGauge);
  if (f == nullptr) return;
  f->series[key].value = value;
}

void Registry::Add(absl::string_view name, const Labels& labels, double delta) {
  AddRendered(name, RenderLabels(labels), delta);
}

void Registry::AddRendered(absl::string_view name, const std::string& key, double delta) {
  absl::MutexLock lock(&mu_);
  Family* f = Find(name, Type::kGauge);
  if (f == nullptr) return;
  f->series[key].value += delta;
}

void Registry::SetCounter(absl::string_view name, const Labels& labels, double total) {
  const std::string key = RenderLabels(labels);
  absl::MutexLock lock(&mu_);
  Family* f = Find(name, Type::kCounter);
  if (f == nullptr) return;
  Series& s = f->series[key];
  if (total > s.value) s.value = total;
}

void Registry::Observe(absl::string_view name, const Labels& labels, double value) {
  ObserveRendered(name, RenderLabels(labels), value);
}

void Registry::ObserveRendered(absl::string_view name, const std::string& key, double value) {
  absl::MutexLock lock(&mu_);
  Family* f = Find(name, Type::kHistogram);
  if (f == nullptr) return;
  Series& s = f->series[key];
  if (s.counts.empty()) s.counts.assign(f->bounds.size() + 1, 0);
  const size_t i = static_cast<size_t>(
      std::lower_bound(f->bounds.begin(), f->bounds.end(), value) - f->bounds.begin());
  ++s.counts[i];
  ++s.count;
  s.value += value;
}

void Registry::Clear(absl::string_view name) {
  absl::MutexLock lock(&mu_);
  auto it = families_.find(name);
  if (it != families_.end()) it->second.series.clear();
}

void Registry::AddCollector(std::function<void(Registry*)> collector) {
  absl::MutexLock lock(&collectors_mu_);
  collectors_.push_back(std::move(collector));
}

std::string Registry::Render() {
  {
    // Collectors call Set/Clear, which take mu_; they run outside it.
    absl::MutexLock lock(&collectors_mu_);
    for (auto& c : collectors_) c(this);
  }
  std::string out;
  absl::MutexLock lock(&mu_);
  for (const auto& [name, f] : families_) {
    out.append("# HELP ").append(name).append(" ");
    EscapeInto(f.help, false, &out);
    out.append("\n# TYPE ").append(name).append(" ");
    out.append(f.type == Type::kCounter ? "counter" : f.type == Type::kGauge ? "gauge" : "histogram");
    out.append("\n");
    for (const auto& [key, s] : f.series) {
      if (f.type != Type::kHistogram) {
        absl::StrAppend(&out, name, key, " ", FormatValue(s.value), "\n");
        continue;
      }
      uint64_t cumulative = 0;
      for (size_t i = 0; i < s.counts.size(); ++i) {
        cumulative += s.counts[i];
        const std::string le =
            i < f.bounds.size() ? absl::StrCat("le=\"", FormatValue(f.bounds[i]), "\"") : "le=\"+Inf\"";
        absl::StrAppend(&out, name, "_bucket", WithLabel(key, le), " ", cumulative, "\n");
      }
      absl::StrAppend(&out, name, "_sum", key, " ", FormatValue(s.value), "\n");
      absl::StrAppend(&out, name, "_count", key, " ", s.count, "\n");
    }
  }
  return out;
}

double Registry::Value(absl::string_view name, const Labels& labels) const {
  absl::MutexLock lock(&mu_);
  auto it = families_.find(name);
  if (it == families_.end()) return -1;
  auto s = it->second.series.find(RenderLabels(labels));
  return s == it->second.series.end() ? -1 : s->second.value;
}

double Registry::HistogramCount(absl::string_view name, const Labels& labels) const {
  absl::MutexLock lock(&mu_);
  auto it = families_.find(name);
  if (it == families_.end()) return -1;
  auto s = it->second.series.find(RenderLabels(labels));
  return s == it->second.series.end() ? -1 : static_cast<double>(s->second.count);
}

int64_t ResidentMemoryBytes() {
  std::ifstream in("/proc/self/statm");
  int64_t size = 0, resident = 0;
  if (!(in >> size >> resident)) return 0;
  return resident * sysconf(_SC_PAGESIZE);
}

void AddProcessCollector(Registry* registry) {
  registry->DeclareGauge("process_resident_memory_bytes", "Resident memory size in bytes.");
  registry->DeclareGauge("process_open_fds", "Number of open file descriptors.");
  registry->DeclareGauge("process_start_time_seconds",
                         "Start time of the process since unix epoch in seconds.");
  registry->DeclareCounter("process_cpu_seconds_total", "Total user and system CPU time in seconds.");
  const double start = absl::ToUnixMicros(absl::Now()) / 1e6;
  registry->AddCollector([start](Registry* r) {
    r->Set("process_resident_memory_bytes", {}, static_cast<double>(ResidentMemoryBytes()));
    r->Set("process_start_time_seconds", {}, start);
    int fds = 0;
    if (DIR* d = opendir("/proc/self/fd")) {
      while (readdir(d) != nullptr) ++fds;
      closedir(d);
      fds -= 3;  // ".", ".." and the directory's own fd
    }
    r->Set("process_open_fds", {}, fds);
    std::ifstream in("/proc/self/stat");
    std::string line;
    std::getline(in, line);
    // Fields after the ")" that closes the command name; utime, stime are 14, 15.
    const size_t close = line.rfind(')');
    if (close != std::string::npos) {
      std::vector<std::string> f = absl::StrSplit(line.substr(close + 2), ' ');
      if (f.size() > 13) {
        const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
        double utime = 0, stime = 0;
        if (!absl::SimpleAtod(f[11], &utime) || !absl::SimpleAtod(f[12], &stime)) return;
        const double cpu = (utime + stime) / ticks;
        r->SetCounter("process_cpu_seconds_total", {}, cpu);
      }
    }
  });
}

}  // namespace metrics
}  // namespace kernelserve
