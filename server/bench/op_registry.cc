#include "server/bench/op_registry.h"

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace kernelserve {
namespace bench {
namespace {

struct Registry {
  absl::Mutex mu;
  std::map<int, std::unique_ptr<const BenchOpEntry>> entries ABSL_GUARDED_BY(mu);
  std::map<int, int> registrations ABSL_GUARDED_BY(mu);
};

// Built on first use: entries register during static initialisation, in
// whatever order the linker puts their files.
Registry& TheRegistry() {
  static Registry* r = new Registry;
  return *r;
}

}  // namespace

absl::Status BenchOpEntry::Placeholders(const pb::BenchJobSpec& spec, const InputDescs& descs,
                                        HostTensors* tensors, OpCall* call) const {
  (void)spec;
  (void)call;
  for (const auto& [name, d] : descs) tensors->emplace(name, HostTensor(d, {}));
  return absl::OkStatus();
}

double BenchOpEntry::Bytes(const OpCall& call, const HostTensors& tensors) const {
  double bytes = static_cast<double>(call.OutputDesc().num_bytes());
  for (const auto& [name, t] : tensors) bytes += static_cast<double>(t.num_bytes());
  return bytes;
}

absl::StatusOr<std::vector<double>> BenchOpEntry::Reference(const OpCall& host_call) const {
  return OracleReference(host_call);
}

absl::StatusOr<OracleSample> BenchOpEntry::ReferenceSample(const OpCall& host_call, double max_flops) const {
  return OracleReferenceSample(host_call, max_flops);
}

void RegisterBenchOp(std::unique_ptr<const BenchOpEntry> entry) {
  Registry& r = TheRegistry();
  absl::MutexLock l(&r.mu);
  const int op = static_cast<int>(entry->op());
  ++r.registrations[op];
  r.entries.emplace(op, std::move(entry));  // a second one for the op is dropped (and counted)
}

const BenchOpEntry* FindBenchOp(BenchOp op) {
  Registry& r = TheRegistry();
  absl::MutexLock l(&r.mu);
  auto it = r.entries.find(static_cast<int>(op));
  return it == r.entries.end() ? nullptr : it->second.get();
}

absl::StatusOr<const BenchOpEntry*> BenchOpOf(const pb::BenchJobSpec& spec) {
  const BenchOpEntry* e = FindBenchOp(static_cast<BenchOp>(spec.op()));
  if (e == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.op: expected one of ", BenchOpNames(", ", ", "), ", got ", spec.op()));
  }
  return e;
}

std::vector<const BenchOpEntry*> AllBenchOps() {
  Registry& r = TheRegistry();
  absl::MutexLock l(&r.mu);
  std::vector<const BenchOpEntry*> all;
  for (const auto& [op, e] : r.entries) all.push_back(e.get());
  return all;
}

int BenchOpRegistrations(BenchOp op) {
  Registry& r = TheRegistry();
  absl::MutexLock l(&r.mu);
  auto it = r.registrations.find(static_cast<int>(op));
  return it == r.registrations.end() ? 0 : it->second;
}

std::string BenchOpNames(const std::string& sep, const std::string& last_sep) {
  const std::vector<const BenchOpEntry*> all = AllBenchOps();
  std::string s;
  for (size_t i = 0; i < all.size(); ++i) {
    if (i > 0) s += i + 1 == all.size() ? last_sep : sep;
    s += all[i]->name();
  }
  return s;
}

}  // namespace bench
}  // namespace kernelserve
