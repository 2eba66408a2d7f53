#include "client/bench_client.h"

#include <fstream>
#include <map>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "server/status_mapping.h"

namespace kernelserve {
namespace {

bool Terminal(pb::BenchJobState s) {
  return s == pb::JOB_DONE || s == pb::JOB_FAILED || s == pb::JOB_CANCELLED || s == pb::JOB_INTERRUPTED;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string OpName(int op) {
  std::string n = pb::BenchOp_Name(static_cast<pb::BenchOp>(op));
  if (n.rfind("OP_", 0) == 0) n = n.substr(3);
  return absl::AsciiStrToLower(n);
}

std::string XmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // Control characters are not allowed in XML 1.0.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t') {
          out += ' ';
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::string Cell(const std::string& s) {
  std::string out;
  for (char c : s) out += (c == '|') ? '/' : (c == '\n' ? ' ' : c);
  return out;
}

std::string JobLabel(const pb::BenchJob& j) { return j.spec().name().empty() ? j.id() : j.spec().name(); }

}  // namespace

// ------------------------------------------------------------------ client

absl::StatusOr<std::unique_ptr<BenchClient>> BenchClient::Connect(const ClientOptions& options) {
  std::unique_ptr<BenchClient> c(new BenchClient(options));
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_mb << 20);
  args.SetMaxSendMessageSize(options.max_message_mb << 20);
  auto creds = options.credentials ? options.credentials : grpc::InsecureChannelCredentials();
  c->channel_ = grpc::CreateCustomChannel(options.target, creds, args);
  if (!c->channel_) return absl::InvalidArgumentError(absl::StrCat("cannot create a channel to ", options.target));
  c->stub_ = pb::BenchService::NewStub(c->channel_);
  return c;
}

void BenchClient::Prepare(grpc::ClientContext* ctx, absl::Duration timeout) const {
  if (timeout > absl::ZeroDuration()) ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  if (!options_.bearer_token.empty()) ctx->AddMetadata("authorization", "Bearer " + options_.bearer_token);
}

absl::StatusOr<pb::BenchJob> BenchClient::Submit(const pb::BenchJobSpec& spec) {
  grpc::ClientContext ctx;
  Prepare(&ctx, options_.default_timeout);
  pb::SubmitBenchRequest req;
  *req.mutable_spec() = spec;
  pb::BenchJob job;
  grpc::Status s = stub_->Submit(&ctx, req, &job);
  if (!s.ok()) return FromGrpcStatus(s);
  return job;
}

absl::StatusOr<pb::BenchJob> BenchClient::Get(const std::string& job_id) {
  grpc::ClientContext ctx;
  Prepare(&ctx, options_.default_timeout);
  pb::GetBenchRequest req;
  req.set_job_id(job_id);
  pb::BenchJob job;
  grpc::Status s = stub_->Get(&ctx, req, &job);
  if (!s.ok()) return FromGrpcStatus(s);
  return job;
}

absl::StatusOr<std::vector<pb::BenchJob>> BenchClient::List(const pb::ListBenchRequest& request) {
  grpc::ClientContext ctx;
  Prepare(&ctx, options_.default_timeout);
  pb::ListBenchResponse resp;
  grpc::Status s = stub_->List(&ctx, request, &resp);
  if (!s.ok()) return FromGrpcStatus(s);
  return std::vector<pb::BenchJob>(resp.jobs().begin(), resp.jobs().end());
}

absl::StatusOr<pb::BenchJob> BenchClient::Cancel(const std::string& job_id, const std::string& reason) {
  grpc::ClientContext ctx;
  Prepare(&ctx, options_.default_timeout);
  pb::CancelBenchRequest req;
  req.set_job_id(job_id);
  req.set_reason(reason);
  pb::BenchJob job;
  grpc::Status s = stub_->Cancel(&ctx, req, &job);
  if (!s.ok()) return FromGrpcStatus(s);
  return job;
}

absl::StatusOr<pb::ListVariantsResponse> BenchClient::ListVariants(pb::BenchOp op) {
  grpc::ClientContext ctx;
  Prepare(&ctx, options_.default_timeout);
  pb::ListVariantsRequest req;
  req.set_op(op);
  pb::ListVariantsResponse resp;
  grpc::Status s = stub_->ListVariants(&ctx, req, &resp);
  if (!s.ok()) return FromGrpcStatus(s);
  return resp;
}

absl::StatusOr<pb::LeaderboardResponse> BenchClient::Leaderboard(const pb::LeaderboardRequest& request) {
  grpc::ClientContext ctx;
  Prepare(&ctx, options_.default_timeout);
  pb::LeaderboardResponse resp;
  grpc::Status s = stub_->Leaderboard(&ctx, request, &resp);
  if (!s.ok()) return FromGrpcStatus(s);
  return resp;
}

absl::StatusOr<pb::BenchJob> BenchClient::Watch(const std::string& job_id,
                                                const std::function<void(const pb::BenchEvent&)>& on_event,
                                                absl::Duration timeout) {
  const absl::Time until = timeout > absl::ZeroDuration() ? absl::Now() + timeout : absl::InfiniteFuture();
  int64_t after = 0;
  absl::Duration backoff = absl::Milliseconds(100);
  // A server that stays away this long is not restarting.
  constexpr absl::Duration kMaxUnavailable = absl::Minutes(2);
  absl::Time last_contact = absl::Now();
  while (true) {
    grpc::ClientContext ctx;
    if (until != absl::InfiniteFuture()) ctx.set_deadline(absl::ToChronoTime(until));
    if (!options_.bearer_token.empty()) ctx.AddMetadata("authorization", "Bearer " + options_.bearer_token);
    pb::WatchBenchRequest req;
    req.set_job_id(job_id);
    req.set_after_seq(after);
    auto reader = stub_->Watch(&ctx, req);
    pb::BenchEvent e;
    std::optional<pb::BenchJob> final_job;
    while (reader->Read(&e)) {
      after = e.seq();
      backoff = absl::Milliseconds(100);
      last_contact = absl::Now();
      on_event(e);
      if (e.has_job() && Terminal(e.job().state())) final_job = e.job();
    }
    grpc::Status s = reader->Finish();
    if (s.ok()) {
      if (final_job) return *final_job;
      return Get(job_id);
    }
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE || absl::Now() + backoff >= until ||
        absl::Now() - last_contact > kMaxUnavailable) {
      return FromGrpcStatus(s);
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(2));
  }
}

// ------------------------------------------------------------------ suites

absl::StatusOr<pb::BenchSuite> ParseSuite(const std::string& text, const std::string& what) {
  pb::BenchSuite suite;
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{') {
    google::protobuf::util::JsonParseOptions opts;
    auto st = google::protobuf::util::JsonStringToMessage(text, &suite, opts);
    if (!st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": not a BenchSuite in JSON: ", st.ToString()));
    }
  } else if (!google::protobuf::TextFormat::ParseFromString(text, &suite)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": neither JSON nor a BenchSuite text proto"));
  }
  if (suite.jobs().empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": the suite has no jobs"));
  if (suite.name().empty()) suite.set_name(what);
  for (int i = 0; i < suite.jobs_size(); ++i) {
    if (suite.jobs(i).name().empty()) suite.mutable_jobs(i)->set_name(absl::StrCat(suite.name(), "/", i));
  }
  return suite;
}

absl::StatusOr<pb::BenchSuite> LoadSuite(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  return ParseSuite(*text, path);
}

// ------------------------------------------------------------------ export

std::string ExportJson(const std::vector<pb::BenchJob>& jobs) {
  pb::ListBenchResponse all;
  for (const auto& j : jobs) *all.add_jobs() = j;
  std::string out;
  google::protobuf::util::JsonPrintOptions opts;
  opts.add_whitespace = true;
  opts.preserve_proto_field_names = true;
  opts.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(all, &out, opts);
  return out;
}

absl::StatusOr<std::vector<pb::BenchJob>> ParseExportJson(const std::string& json, const std::string& what) {
  pb::ListBenchResponse all;
  google::protobuf::util::JsonParseOptions opts;
  opts.ignore_unknown_fields = true;
  auto st = google::protobuf::util::JsonStringToMessage(json, &all, opts);
  if (!st.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": not a results file from 'kernelctl export --format=json': ", st.ToString()));
  }
  return std::vector<pb::BenchJob>(all.jobs().begin(), all.jobs().end());
}

absl::StatusOr<std::vector<pb::BenchJob>> LoadExportJson(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  return ParseExportJson(*text, path);
}

std::string CeilingText(double value, const std::string& unit) {
  return value > 0 ? absl::StrFormat("%.3g %s", value, unit) : std::string("not measured");
}

std::string ExportMarkdown(const std::vector<pb::BenchJob>& jobs) {
  std::string out =
      "| job | op | shape | variant | gate | rel err | time (ms) | ± sd | TFLOP/s | TB/s | % GEMM | % copy | "
      "SM MHz | rank | vs first |\n"
      "| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  std::vector<std::string> notes;
  for (const pb::BenchJob& j : jobs) {
    const std::string label = Cell(JobLabel(j));
    if (j.state() != pb::JOB_DONE) {
      absl::StrAppend(&out, "| ", label, " | ", OpName(j.spec().op()), " | ", Cell(j.shape_desc()), " | — | ",
                      pb::BenchJobState_Name(j.state()), " | | | | | | | | | | |\n");
    }
    for (const pb::VariantResult& r : j.results()) {
      const bool timed = r.timed();
      auto num = [&](const char* fmt, double v) { return timed ? absl::StrFormat(fmt, v) : std::string(); };
      std::string gate = r.correct() ? "pass" : "**FAIL**";
      std::string clock = r.clocks().available() ? absl::StrFormat("%.0f", r.clocks().sm_clock_mhz_mean()) : "";
      absl::StrAppend(&out, "| ", label, " | ", OpName(j.spec().op()), " | ", Cell(j.shape_desc()), " | ",
                      Cell(r.variant()), " | ", gate, " | ",
                      r.error_message().empty() ? absl::StrFormat("%.3g", r.error().rel_rms()) : "—", " | ",
                      num("%.4f", r.time().value_ms()), " | ", num("%.4f", r.time().stddev_ms()), " | ",
                      num("%.3g", r.tflops()), " | ", num("%.3g", r.tbps()), " | ",
                      timed && r.frac_gemm_ceiling() > 0
                          ? absl::StrFormat("%.1f%s", 100 * r.frac_gemm_ceiling(),
                                            r.frac_gemm_ceiling() > 1 ? " (!)" : "")
                          : "",
                      " | ",
                      timed && r.frac_copy_ceiling() > 0
                          ? absl::StrFormat("%.1f%s", 100 * r.frac_copy_ceiling(),
                                            r.frac_copy_ceiling() > 1 ? " (!)" : "")
                          : "",
                      " | ", clock, " | ", r.rank() > 0 ? absl::StrCat(r.rank()) : "", " | ",
                      r.rank() > 0 ? absl::StrFormat("%.2fx", r.speedup_vs_first()) : "", " |\n");
      if (!r.correct()) {
        notes.push_back(absl::StrCat(label, " / ", r.variant(), ": ", r.gate_message()));
      }
    }
    std::string method;
    for (const auto& r : j.results()) {
      if (r.timed()) method = r.method();
    }
    std::string line = absl::StrCat(label, " (", j.id(), "): ", pb::BenchJobState_Name(j.state()));
    if (!j.error().empty()) absl::StrAppend(&line, " — ", j.error());
    absl::StrAppend(&line, "; ", j.node().empty() ? "" : "node " + j.node() + ", ", j.backend(), " device ",
                    j.device(), " (", j.device_name(), ")");
    if (!j.driver().empty()) absl::StrAppend(&line, ", driver ", j.driver());
    if (!method.empty()) absl::StrAppend(&line, "; ", method);
    const pb::DeviceCeilings& c = j.ceilings();
    if (c.gemm_tflops() > 0 || c.copy_tbps() > 0) {
      absl::StrAppend(&line, "; ceilings: GEMM ", CeilingText(c.gemm_tflops(), "TFLOP/s"), ", copy ",
                      CeilingText(c.copy_tbps(), "TB/s"));
    }
    absl::StrAppend(&line, "; server ", j.server_version());
    for (const auto& n : j.notes()) absl::StrAppend(&line, "; ", n);
    notes.push_back(line);
  }
  if (!notes.empty()) {
    out += "\n";
    for (const auto& n : notes) absl::StrAppend(&out, "- ", n, "\n");
  }
  return out;
}

std::vector<CiCheck> CiChecks(const std::vector<pb::BenchJob>& jobs, const std::vector<pb::BenchJob>* baseline,
                              double max_regression_pct) {
  std::map<std::pair<std::string, std::string>, double> base;
  if (baseline != nullptr) {
    for (const auto& j : *baseline) {
      for (const auto& r : j.results()) {
        if (j.state() == pb::JOB_DONE && r.timed() && r.time().value_ms() > 0) {
          base[{JobLabel(j), r.variant()}] = r.time().value_ms();
        }
      }
    }
  }
  std::vector<CiCheck> checks;
  for (const auto& j : jobs) {
    const std::string label = JobLabel(j);
    if (j.state() != pb::JOB_DONE) {
      checks.push_back({label, "job", true,
                        absl::StrCat("job ", j.id(), " ended ", pb::BenchJobState_Name(j.state()), ": ", j.error()), 0});
      continue;
    }
    for (const auto& r : j.results()) {
      CiCheck c{label, r.variant(), !r.correct(), r.correct() ? r.gate_message() : r.gate_message(),
                r.time().value_ms() / 1e3};
      if (r.correct() && r.timed()) {
        c.message = absl::StrFormat("%s; %.4f ms, %.3g TFLOP/s", r.gate_message(), r.time().value_ms(), r.tflops());
      }
      checks.push_back(c);
      auto it = base.find({label, r.variant()});
      if (it != base.end() && r.timed()) {
        const double ratio = r.time().value_ms() / it->second;
        const bool slow = ratio > 1.0 + max_regression_pct / 100.0;
        checks.push_back({label, r.variant() + " vs baseline", slow,
                          absl::StrFormat("%.4f ms vs baseline %.4f ms (%+.1f%%, limit +%.1f%%)", r.time().value_ms(),
                                          it->second, 100 * (ratio - 1), max_regression_pct),
                          r.time().value_ms() / 1e3});
      }
    }
  }
  return checks;
}

std::string ExportJUnit(const std::string& suite_name, const std::vector<CiCheck>& checks) {
  std::map<std::string, std::vector<const CiCheck*>> by_suite;
  std::vector<std::string> order;
  int failures = 0;
  for (const auto& c : checks) {
    if (!by_suite.count(c.suite)) order.push_back(c.suite);
    by_suite[c.suite].push_back(&c);
    failures += c.failed ? 1 : 0;
  }
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  absl::StrAppend(&out, "<testsuites name=\"", XmlEscape(suite_name), "\" tests=\"", checks.size(),
                  "\" failures=\"", failures, "\">\n");
  for (const auto& s : order) {
    const auto& cs = by_suite[s];
    int f = 0;
    for (const CiCheck* c : cs) f += c->failed ? 1 : 0;
    absl::StrAppend(&out, "  <testsuite name=\"", XmlEscape(s), "\" tests=\"", cs.size(), "\" failures=\"", f,
                    "\">\n");
    for (const CiCheck* c : cs) {
      absl::StrAppend(&out, "    <testcase classname=\"", XmlEscape(s), "\" name=\"", XmlEscape(c->name),
                      "\" time=\"", absl::StrFormat("%.6f", c->seconds), "\"");
      if (c->failed) {
        absl::StrAppend(&out, ">\n      <failure message=\"", XmlEscape(c->message), "\">", XmlEscape(c->message),
                        "</failure>\n    </testcase>\n");
      } else {
        absl::StrAppend(&out, ">\n      <system-out>", XmlEscape(c->message), "</system-out>\n    </testcase>\n");
      }
    }
    out += "  </testsuite>\n";
  }
  out += "</testsuites>\n";
  return out;
}

std::string ExportJUnit(const std::vector<pb::BenchJob>& jobs) {
  return ExportJUnit("kernelserve", CiChecks(jobs, nullptr, 0));
}

}  // namespace kernelserve
