#include "server/bench/leaderboard.h"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "server/bench/bench_inputs.h"
#include "server/bench/op_registry.h"
#include "server/user_kernels/builder.h"

namespace kernelserve {
namespace bench {
namespace {

constexpr int kDefaultLimit = 20;
constexpr int kMaxLimit = 1000;

// The request's op and shape as a job spec, so that the op's own
// validation and shape description apply.
pb::BenchJobSpec ShapeSpec(const pb::LeaderboardRequest& r) {
  pb::BenchJobSpec s;
  s.set_op(r.op());
  switch (r.shape_case()) {
    case pb::LeaderboardRequest::kAttention:
      *s.mutable_attention() = r.attention();
      break;
    case pb::LeaderboardRequest::kMla:
      *s.mutable_mla() = r.mla();
      break;
    case pb::LeaderboardRequest::kMoe:
      *s.mutable_moe() = r.moe();
      break;
    default:
      break;
  }
  return s;
}

}  // namespace

absl::Status ValidateLeaderboardRequest(const pb::LeaderboardRequest& request) {
  if (FindBenchOp(static_cast<BenchOp>(request.op())) == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("op: expected ", BenchOpNames(", ", " or "), ", got ",
                                                   pb::BenchOp_Name(request.op()).empty()
                                                       ? std::to_string(request.op())
                                                       : pb::BenchOp_Name(request.op())));
  }
  if (request.limit() < 0 || request.limit() > kMaxLimit) {
    return absl::InvalidArgumentError(
        absl::StrCat("limit: expected 0 (", kDefaultLimit, ") up to ", kMaxLimit, ", got ", request.limit()));
  }
  if (request.shape_case() == pb::LeaderboardRequest::SHAPE_NOT_SET) return absl::OkStatus();
  // The shape as a job would give it; the messages name the request's own fields.
  const absl::Status st = ValidateSpec(ShapeSpec(request));
  if (st.ok()) return st;
  absl::string_view message = st.message();
  absl::ConsumePrefix(&message, "spec.");
  return absl::InvalidArgumentError(message);
}

pb::LeaderboardResponse RankLeaderboard(const std::vector<pb::BenchJob>& jobs, const pb::LeaderboardRequest& request) {
  const BenchOpEntry* op = FindBenchOp(static_cast<BenchOp>(request.op()));
  const bool one_shape = request.shape_case() != pb::LeaderboardRequest::SHAPE_NOT_SET;
  const std::string wanted = one_shape ? op->ShapeDesc(ShapeSpec(request)) : "";
  // (shape, device, variant, source hash) -> the best entry.
  std::map<std::tuple<std::string, std::string, std::string, std::string>, pb::LeaderboardEntry> best;
  for (const pb::BenchJob& j : jobs) {
    if (j.spec().op() != request.op() || j.state() != pb::JOB_DONE) continue;
    const std::string shape = op->ShapeDesc(j.spec());
    if (one_shape && shape != wanted) continue;
    for (const pb::VariantResult& r : j.results()) {
      const bool user = user_kernels::IsUserVariantName(r.variant());
      if (!user && !request.include_builtin()) continue;
      if (!r.correct() || !r.timed() || !(r.time().value_ms() > 0)) continue;
      const auto key = std::make_tuple(shape, j.device_name(), r.variant(), r.source_sha256());
      auto [it, fresh] = best.try_emplace(key);
      pb::LeaderboardEntry& e = it->second;
      const int runs = e.runs() + 1;
      if (fresh || r.time().value_ms() < e.time_ms()) {
        e.set_shape_desc(j.shape_desc().empty() ? shape : j.shape_desc());
        e.set_device_name(j.device_name());
        e.set_backend(j.backend());
        e.set_variant(r.variant());
        absl::string_view name = r.variant();
        e.set_kernel_name(user && absl::ConsumePrefix(&name, "user:") ? std::string(name) : "");
        e.set_source_sha256(r.source_sha256());
        e.set_tenant(j.tenant().empty() ? j.spec().submitter() : j.tenant());
        e.set_time_ms(r.time().value_ms());
        e.set_tflops(r.tflops());
        e.set_tbps(r.tbps());
        e.set_finished_unix_ms(j.finished_unix_ms());
        e.set_job_id(j.id());
      }
      e.set_runs(runs);
    }
  }
  std::vector<pb::LeaderboardEntry> all;
  for (auto& [key, e] : best) all.push_back(std::move(e));
  std::sort(all.begin(), all.end(), [](const pb::LeaderboardEntry& a, const pb::LeaderboardEntry& b) {
    if (a.shape_desc() != b.shape_desc()) return a.shape_desc() < b.shape_desc();
    if (a.device_name() != b.device_name()) return a.device_name() < b.device_name();
    if (a.time_ms() != b.time_ms()) return a.time_ms() < b.time_ms();
    return a.job_id() < b.job_id();
  });
  const int limit = request.limit() > 0 ? request.limit() : kDefaultLimit;
  pb::LeaderboardResponse out;
  int rank = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    const bool same = i > 0 && all[i].shape_desc() == all[i - 1].shape_desc() &&
                      all[i].device_name() == all[i - 1].device_name();
    rank = same ? rank + 1 : 1;
    if (rank > limit) continue;
    all[i].set_rank(rank);
    *out.add_entries() = all[i];  // a copy: the next entry compares with this one
  }
  return out;
}

}  // namespace bench
}  // namespace kernelserve
