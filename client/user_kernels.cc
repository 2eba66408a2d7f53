#include "client/user_kernels.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kernelserve {

absl::StatusOr<pb::UserKernel> UserKernelFromFile(const std::string& path, const std::string& name,
                                                  const std::vector<std::string>& flags, const std::string& backend) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("--kernel: cannot read ", path));
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string bytes = ss.str();
  pb::UserKernel k;
  const size_t slash = path.rfind('/');
  const std::string file = slash == std::string::npos ? path : path.substr(slash + 1);
  k.set_filename(file);
  k.set_name(name.empty() ? file.substr(0, file.find('.')) : name);
  k.set_backend(backend);
  if (absl::StartsWith(bytes, "\x7f" "ELF")) {
    k.set_shared_object(bytes);
  } else {
    k.set_source(bytes);
  }
  for (const std::string& fl : flags) k.add_flags(fl);
  return k;
}

std::vector<LeaderboardRow> Leaderboard(const std::vector<pb::BenchJob>& jobs, pb::BenchOp op,
                                        const std::string& shape_filter) {
  std::map<std::tuple<std::string, std::string, std::string>, LeaderboardRow> best;
  for (const pb::BenchJob& j : jobs) {
    if (j.spec().op() != op || j.state() != pb::JOB_DONE) continue;
    if (!shape_filter.empty() && !absl::StrContains(j.shape_desc(), shape_filter)) continue;
    for (const pb::VariantResult& r : j.results()) {
      if (!r.correct() || !r.timed() || !(r.time().value_ms() > 0)) continue;
      const auto key = std::make_tuple(j.shape_desc(), r.variant(), r.source_sha256());
      auto it = best.find(key);
      if (it != best.end() && it->second.value_ms <= r.time().value_ms()) continue;
      LeaderboardRow row;
      row.shape_desc = j.shape_desc();
      row.variant = r.variant();
      row.source_sha256 = r.source_sha256();
      row.tenant = j.tenant().empty() ? j.spec().submitter() : j.tenant();
      row.value_ms = r.time().value_ms();
      row.tflops = r.tflops();
      row.tbps = r.tbps();
      row.job_id = j.id();
      row.backend = j.backend();
      row.device_name = j.device_name();
      best[key] = row;
    }
  }
  std::vector<LeaderboardRow> rows;
  for (auto& [key, row] : best) rows.push_back(row);
  std::sort(rows.begin(), rows.end(), [](const LeaderboardRow& a, const LeaderboardRow& b) {
    return a.shape_desc != b.shape_desc ? a.shape_desc < b.shape_desc : a.value_ms < b.value_ms;
  });
  for (size_t i = 0; i < rows.size(); ++i) {
    rows[i].rank = i > 0 && rows[i - 1].shape_desc == rows[i].shape_desc ? rows[i - 1].rank + 1 : 1;
  }
  return rows;
}

std::string LeaderboardMarkdown(const std::vector<LeaderboardRow>& rows) {
  if (rows.empty()) return "no passing results\n";
  std::string out, shape;
  for (const LeaderboardRow& r : rows) {
    if (r.shape_desc != shape || out.empty()) {
      shape = r.shape_desc;
      absl::StrAppend(&out, out.empty() ? "" : "\n", "### ", shape, "\n\n",
                      "| rank | variant | source sha256 | tenant | ms | TFLOP/s | TB/s | device | job |\n",
                      "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    }
    absl::StrAppend(&out, absl::StrFormat("| %d | %s | %s | %s | %.4f | %.3g | %.3g | %s (%s) | %s |\n", r.rank,
                                          r.variant, r.source_sha256.empty() ? "-" : r.source_sha256.substr(0, 12),
                                          r.tenant, r.value_ms, r.tflops, r.tbps, r.device_name, r.backend, r.job_id));
  }
  return out;
}

}  // namespace kernelserve
