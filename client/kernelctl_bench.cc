#include "client/kernelctl_bench.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <iostream>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/bench_client.h"
#include "client/kernelctl_flags.h"
#include "client/report_py.h"
#include "kernels/api/variants.h"

namespace kernelserve {
namespace kernelctl {
namespace {

int Fail(const absl::Status& s, int code) {
  std::cerr << "error: " << absl::StatusCodeToString(s.code()) << ": " << s.message() << "\n";
  return code;
}

int Usage(const std::string& msg) { return Fail(absl::InvalidArgumentError(msg), 2); }

void PrintUsage(const std::string& synopsis, const std::string& about, const FlagSet& f) {
  std::cout << "usage: " << synopsis << "\n\n" << about << "\n\nflags:\n" << f.Usage();
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot write"));
  out << text;
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

absl::StatusOr<pb::BenchOp> ParseOp(const std::string& s) {
  absl::StatusOr<BenchOp> op = ParseBenchOp(absl::StrReplaceAll(absl::AsciiStrToLower(s), {{"-", "_"}}));
  if (!op.ok()) return absl::InvalidArgumentError(absl::StrCat("--op: ", op.status().message()));
  return static_cast<pb::BenchOp>(*op);
}

// Proto enum by its lower-case name without prefix ("passes" -> METHOD_PASSES).
template <typename Enum>
absl::StatusOr<Enum> ParseEnum(const std::string& flag, const std::string& value,
                               const google::protobuf::EnumDescriptor* d, const std::string& prefix) {
  const std::string want = absl::AsciiStrToUpper(absl::StrReplaceAll(value, {{"-", "_"}}));
  std::vector<std::string> names;
  for (int i = 0; i < d->value_count(); ++i) {
    std::string n = d->value(i)->name();
    if (d->value(i)->number() == 0) continue;
    if (n == want || n == prefix + want) return static_cast<Enum>(d->value(i)->number());
    if (absl::StartsWith(n, prefix)) n = n.substr(prefix.size());
    names.push_back(absl::AsciiStrToLower(n));
  }
  return absl::InvalidArgumentError(absl::StrCat("--", flag, " must be one of ", absl::StrJoin(names, ", "),
                                                 ", not \"", value, "\""));
}

std::string StateName(pb::BenchJobState s) {
  std::string n = pb::BenchJobState_Name(s);
  return absl::AsciiStrToLower(absl::StartsWith(n, "JOB_") ? n.substr(4) : n);
}

// ------------------------------------------------------------------ progress

class Progress {
 public:
  Progress() : tty_(isatty(STDERR_FILENO) == 1) {}
  ~Progress() { Clear(); }

  void Event(const pb::BenchEvent& e) {
    std::string what = e.message();
    if (e.phase() == pb::PHASE_TIMING && e.passes() > 1) {
      what = absl::StrCat("pass ", e.pass(), " of ", e.passes(), ": ", e.variant());
    }
    if (!tty_) {
      std::cerr << e.job_id() << " " << absl::StrFormat("[%3.0f%%] ", 100 * e.progress()) << PhaseName(e.phase())
                << ": " << e.message() << "\n";
      return;
    }
    // Results and the end stay on screen; the rest redraw one status line.
    if (e.phase() == pb::PHASE_RESULT || e.phase() >= pb::PHASE_DONE) {
      Clear();
      std::cerr << e.job_id() << " " << PhaseName(e.phase()) << ": " << e.message() << "\n";
      if (e.phase() >= pb::PHASE_DONE && e.phase() != pb::PHASE_REQUEUED && e.phase() != pb::PHASE_NOTE) return;
    }
    if (e.phase() == pb::PHASE_QUEUED) what = absl::StrCat("queued, position ", e.queue_position());
    constexpr int kWidth = 30;
    const int fill = static_cast<int>(e.progress() * kWidth + 0.5);
    std::string bar = std::string(static_cast<size_t>(std::clamp(fill, 0, kWidth)), '#') +
                      std::string(static_cast<size_t>(kWidth - std::clamp(fill, 0, kWidth)), '-');
    std::string line = absl::StrFormat("\r\033[K[%s] %3.0f%% %s %s", bar, 100 * e.progress(), e.job_id(), what);
    std::cerr << line << std::flush;
    dirty_ = true;
  }

 private:
  static std::string PhaseName(pb::BenchPhase p) {
    std::string n = pb::BenchPhase_Name(p);
    return absl::AsciiStrToLower(absl::StartsWith(n, "PHASE_") ? n.substr(6) : n);
  }
  void Clear() {
    if (tty_ && dirty_) std::cerr << "\r\033[K" << std::flush;
    dirty_ = false;
  }
  bool tty_;
  bool dirty_ = false;
};

// ------------------------------------------------------------------ spec flags

struct SpecFlags {
  std::string op, name, variants, inputs = "gaussian", buffers, layout = "bhsd", round = "rtne";
  std::string format = "e4m3fn", p_mode = "exact", kv_format = "e4m3fn", method = "kernel", submitter;
  int64_t batch = 1, heads = 0, heads_kv = 0, seq = 0, seq_kv = 0, head_dim = 128, head_dim_v = 0;
  int64_t q_len = 1, num_splits = 0, page_size = 0, tokens = 0, experts = 0, top_k = 0, hidden = 0, inter = 0, out_dim = 0;
  int64_t seed = 1, warmup = 0, iters = 0, passes = 0, priority = 0, device = -1;
  bool causal = false, hadamard = false, swiglu = false, weighted_sum = false, l2_flush = false;
  std::optional<double> warmin, window, time_limit, tolerance, softmax_scale;

  void Define(FlagSet& f) {
    f.String("op", &op, "OP", "attention, fp8_attention, mla_decode, moe_gateup, moe_down or moe_layer");
    f.String("name", &name, "NAME", "job name (CI matches baselines by name and variant)");
    f.String("variants", &variants, "A,B,...", "variants to compare (see 'kernelctl jobs variants'); default: the backend's");
    f.String("inputs", &inputs, "KIND", "gaussian | long-tail (attention ops) | buffers");
    f.Int("seed", &seed, "input seed (default 1)");
    f.String("buffers", &buffers, "NAME=ID,...", "uploaded buffers as inputs (q=ID,k=ID,v=ID, x=ID, ...)");
    f.Int("batch", &batch, "B (default 1)");
    f.Int("heads", &heads, "attention: query heads; mla: heads");
    f.Int("heads-kv", &heads_kv, "attention: KV heads (default --heads)");
    f.Int("seq", &seq, "attention: query length; mla: KV rows per request");
    f.Int("seq-kv", &seq_kv, "attention: key length (default --seq)");
    f.Int("head-dim", &head_dim, "attention: head dim d_qk (default 128)");
    f.Int("head-dim-v", &head_dim_v, "fp8 attention: d_v (default --head-dim)");
    f.Bool("causal", &causal, "causal mask (bottom-right aligned)");
    f.String("layout", &layout, "bhsd|bshd", "attention layout");
    f.String("round", &round, "rtne|rtna|rtz", "bf16 output rounding");
    f.Double("softmax-scale", &softmax_scale, "softmax scale (default 1/sqrt(d))");
    f.String("format", &format, "e4m3fn|e4m3fnuz", "fp8 attention format");
    f.String("p-mode", &p_mode, "exact|lean|naive", "fp8 attention P mode for variants that name none");
    f.Bool("hadamard", &hadamard, "fp8 attention: Hadamard rotation of Q and K");
    f.Int("q-len", &q_len, "mla: draft tokens per request (default 1)");
    f.String("kv-format", &kv_format, "e4m3fn|e4m3fnuz", "mla: KV format");
    f.Int("num-splits", &num_splits, "mla: KV splits (0: backend's choice)");
    f.Int("page-size", &page_size, "mla: 0 contiguous KV (default); N >= 1 a paged pool, pages shuffled");
    f.Int("tokens", &tokens, "moe: T");
    f.Int("experts", &experts, "moe: E");
    f.Int("top-k", &top_k, "moe: experts per token");
    f.Int("hidden", &hidden, "moe: K");
    f.Int("inter", &inter, "moe: I");
    f.Int("out-dim", &out_dim, "moe: N (default --hidden)");
    f.Bool("swiglu", &swiglu, "moe gate/up: fused SwiGLU");
    f.Bool("weighted-sum", &weighted_sum, "moe down: weight and sum per token");
    f.String("method", &method, "METHOD", "kernel | passes | sustained | graph");
    f.Int("warmup", &warmup, "warm-up launches (default 500)");
    f.Int("iters", &iters, "timed launches per pass (default 100)");
    f.Int("passes", &passes, "passes method: passes (default 5)");
    f.Double("warmin", &warmin, "sustained: warm-in seconds (at least 1)");
    f.Double("window", &window, "sustained: window seconds (at least 3)");
    f.Bool("l2-flush", &l2_flush, "flush the L2 / last-level cache before every launch");
    f.Int("priority", &priority, "higher runs first");
    f.Double("time-limit", &time_limit, "hard limit in seconds (default: the server's)");
    f.String("submitter", &submitter, "NAME", "who the job counts against (default anonymous; the token's tenant)");
    f.Int("device", &device, "device index (default: the first free device)");
    f.Double("tolerance", &tolerance, "correctness gate: max rel RMS error (default: the op's)");
  }

  absl::StatusOr<pb::BenchJobSpec> Build() const {
    pb::BenchJobSpec s;
    if (op.empty()) return absl::InvalidArgumentError("bench: give --op or --suite");
    auto o = ParseOp(op);
    if (!o.ok()) return o.status();
    s.set_op(*o);
    s.set_name(name.empty() ? absl::StrCat(op) : name);
    for (absl::string_view v : absl::StrSplit(variants, ',', absl::SkipEmpty())) s.add_variants(std::string(v));
    auto kind = ParseEnum<pb::BenchInputKind>("inputs", inputs, pb::BenchInputKind_descriptor(), "INPUT_");
    if (!kind.ok()) return kind.status();
    s.mutable_inputs()->set_kind(*kind);
    s.mutable_inputs()->set_seed(static_cast<uint64_t>(seed));
    for (absl::string_view kv : absl::StrSplit(buffers, ',', absl::SkipEmpty())) {
      std::pair<std::string, std::string> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
      if (p.first.empty() || p.second.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("--buffers: expected NAME=ID, got \"", kv, "\""));
      }
      (*s.mutable_inputs()->mutable_buffers())[p.first] = p.second;
    }
    auto rnd = ParseEnum<pb::Rounding>("round", round, pb::Rounding_descriptor(), "");
    if (!rnd.ok()) return rnd.status();
    if (*o == pb::OP_ATTENTION || *o == pb::OP_FP8_ATTENTION) {
      auto* a = s.mutable_attention();
      a->set_batch(batch);
      a->set_heads_q(heads);
      a->set_heads_kv(heads_kv);
      a->set_seq_q(seq);
      a->set_seq_kv(seq_kv);
      a->set_head_dim(head_dim);
      a->set_head_dim_v(head_dim_v);
      a->set_causal(causal);
      auto l = ParseEnum<pb::Layout>("layout", layout, pb::Layout_descriptor(), "");
      if (!l.ok()) return l.status();
      a->set_layout(*l);
      a->set_rounding(*rnd);
      if (softmax_scale) a->set_softmax_scale(*softmax_scale);
      auto fmt = ParseEnum<pb::Fp8Format>("format", format, pb::Fp8Format_descriptor(), "");
      if (!fmt.ok()) return fmt.status();
      a->set_format(*fmt);
      auto pm = ParseEnum<pb::PMode>("p-mode", p_mode, pb::PMode_descriptor(), "");
      if (!pm.ok()) return pm.status();
      a->set_p_mode(*pm);
      a->set_hadamard(hadamard);
    } else if (*o == pb::OP_MLA_DECODE) {
      auto* m = s.mutable_mla();
      m->set_batch(batch);
      m->set_q_len(q_len);
      m->set_heads(heads);
      m->set_seq_len(seq);
      m->set_num_splits(num_splits);
      m->set_page_size(page_size);
      auto fmt = ParseEnum<pb::Fp8Format>("kv-format", kv_format, pb::Fp8Format_descriptor(), "");
      if (!fmt.ok()) return fmt.status();
      m->set_kv_format(*fmt);
      m->set_rounding(*rnd);
      if (softmax_scale) m->set_softmax_scale(*softmax_scale);
    } else {
      auto* m = s.mutable_moe();
      m->set_tokens(tokens);
      m->set_experts(experts);
      m->set_top_k(top_k);
      m->set_hidden(hidden);
      m->set_inter(inter);
      m->set_out_dim(out_dim);
      m->set_swiglu(swiglu);
      m->set_weighted_sum(weighted_sum);
      m->set_rounding(*rnd);
    }
    auto meth = ParseEnum<pb::BenchMethod>("method", method, pb::BenchMethod_descriptor(), "METHOD_");
    if (!meth.ok()) return meth.status();
    auto* mo = s.mutable_method();
    mo->set_method(*meth);
    mo->set_warmup(static_cast<int32_t>(warmup));
    mo->set_iters(static_cast<int32_t>(iters));
    mo->set_passes(static_cast<int32_t>(passes));
    if (warmin) mo->set_warmin_s(*warmin);
    if (window) mo->set_window_s(*window);
    mo->set_l2_flush(l2_flush);
    s.set_priority(static_cast<int32_t>(priority));
    if (time_limit) s.set_time_limit_s(*time_limit);
    s.set_submitter(submitter);
    if (device >= 0) s.set_device(static_cast<int32_t>(device));
    if (tolerance) s.set_tolerance(*tolerance);
    return s;
  }
};

// Submits every spec (waiting for earlier jobs when the per-submitter limit
// is reached), follows each to its end, and returns the final jobs in order.
absl::StatusOr<std::vector<pb::BenchJob>> RunJobs(BenchClient& client, const std::vector<pb::BenchJobSpec>& specs,
                                                  Progress& progress) {
  std::vector<std::string> ids;
  std::vector<std::optional<pb::BenchJob>> finals(specs.size());
  size_t watched = 0;
  auto watch_next = [&]() -> absl::Status {
    auto j = client.Watch(ids[watched], [&](const pb::BenchEvent& e) { progress.Event(e); });
    if (!j.ok()) return j.status();
    finals[watched++] = *j;
    return absl::OkStatus();
  };
  for (const auto& spec : specs) {
    while (true) {
      auto job = client.Submit(spec);
      if (job.ok()) {
        std::cerr << "submitted " << job->id() << " (" << spec.name() << ")\n";
        ids.push_back(job->id());
        break;
      }
      if (job.status().code() == absl::StatusCode::kResourceExhausted && watched < ids.size()) {
        if (absl::Status st = watch_next(); !st.ok()) return st;
        continue;
      }
      return absl::Status(job.status().code(), absl::StrCat(spec.name(), ": ", job.status().message()));
    }
  }
  while (watched < ids.size()) {
    if (absl::Status st = watch_next(); !st.ok()) return st;
  }
  std::vector<pb::BenchJob> out;
  for (auto& f : finals) out.push_back(*f);
  return out;
}

absl::StatusOr<std::unique_ptr<BenchClient>> Connect(const ClientOptions& options) {
  return BenchClient::Connect(options);
}

// ------------------------------------------------------------------ commands

int CmdBench(const std::vector<std::string>& args, const ClientOptions& options, bool help) {
  FlagSet f("bench");
  SpecFlags sf;
  sf.Define(f);
  std::string suite, out, format = "markdown";
  bool no_watch = false;
  f.String("suite", &suite, "FILE", "run the jobs of a suite file (JSON or text proto) instead of the flags");
  f.Bool("no-watch", &no_watch, "submit and print the job ids without waiting");
  f.String("output", &format, "markdown|json", "what to print when the jobs finish");
  f.String("out", &out, "FILE", "also write the results as JSON here");
  if (help) {
    PrintUsage("kernelctl bench (--op=OP [shape flags] | --suite=FILE) [flags]",
               "Submits benchmark jobs, follows them (a progress bar on a terminal, plain lines otherwise) and\n"
               "prints a markdown table. Every variant is first checked against the fp64 oracle.",
               f);
    return 0;
  }
  if (absl::Status st = f.Parse(args); !st.ok()) return Fail(st, 2);
  if (format != "markdown" && format != "json") return Usage("--output must be markdown or json");
  std::vector<pb::BenchJobSpec> specs;
  if (!suite.empty()) {
    auto s = LoadSuite(suite);
    if (!s.ok()) return Fail(s.status(), 2);
    specs.assign(s->jobs().begin(), s->jobs().end());
    for (auto& spec : specs) {
      if (!sf.submitter.empty()) spec.set_submitter(sf.submitter);
    }
  } else {
    auto spec = sf.Build();
    if (!spec.ok()) return Fail(spec.status(), 2);
    specs.push_back(*spec);
  }
  auto client = Connect(options);
  if (!client.ok()) return Fail(client.status(), 1);
  if (no_watch) {
    for (const auto& spec : specs) {
      auto j = (*client)->Submit(spec);
      if (!j.ok()) return Fail(j.status(), 1);
      std::cout << j->id() << "\n";
    }
    return 0;
  }
  Progress progress;
  auto jobs = RunJobs(**client, specs, progress);
  if (!jobs.ok()) return Fail(jobs.status(), 1);
  if (!out.empty()) {
    if (absl::Status st = WriteFile(out, ExportJson(*jobs)); !st.ok()) return Fail(st, 1);
  }
  std::cout << (format == "json" ? ExportJson(*jobs) : ExportMarkdown(*jobs));
  for (const auto& j : *jobs) {
    if (j.state() != pb::JOB_DONE) return 1;
  }
  return 0;
}

int CmdJobs(const std::vector<std::string>& args, const ClientOptions& options, bool help) {
  FlagSet f("jobs");
  std::string states, submitter, reason, op, format = "table";
  int64_t limit = 50;
  f.String("state", &states, "S,...", "list: only these states (queued,running,done,failed,cancelled,interrupted)");
  f.String("submitter", &submitter, "NAME", "list: only this submitter's jobs");
  f.Int("limit", &limit, "list: newest N (default 50)");
  f.String("reason", &reason, "TEXT", "cancel: why");
  f.String("op", &op, "OP", "variants: only this op");
  f.String("output", &format, "table|markdown|json", "get/list output");
  if (help) {
    PrintUsage("kernelctl jobs list|get ID|watch ID|cancel ID|variants [flags]",
               "Lists, inspects, follows and cancels benchmark jobs; 'variants' lists the implementations\n"
               "this server can benchmark and its measured ceilings.",
               f);
    return 0;
  }
  std::vector<std::string> pos;
  if (absl::Status st = f.Parse(args, &pos); !st.ok()) return Fail(st, 2);
  if (pos.empty()) return Usage("jobs: give list, get ID, watch ID, cancel ID or variants");
  const std::string action = pos[0];
  auto client = Connect(options);
  if (!client.ok()) return Fail(client.status(), 1);
  BenchClient& c = **client;
  if (action == "list") {
    pb::ListBenchRequest req;
    for (absl::string_view s : absl::StrSplit(states, ',', absl::SkipEmpty())) {
      auto st = ParseEnum<pb::BenchJobState>("state", std::string(s), pb::BenchJobState_descriptor(), "JOB_");
      if (!st.ok()) return Fail(st.status(), 2);
      req.add_states(*st);
    }
    req.set_submitter(submitter);
    req.set_limit(static_cast<int32_t>(limit));
    req.set_summary(format == "table");
    auto jobs = c.List(req);
    if (!jobs.ok()) return Fail(jobs.status(), 1);
    if (format == "json") {
      std::cout << ExportJson(*jobs);
    } else if (format == "markdown") {
      std::cout << ExportMarkdown(*jobs);
    } else {
      std::cout << absl::StrFormat("%-17s %-11s %-14s %-24s %-10s %-4s %s\n", "ID", "STATE", "OP", "NAME", "SUBMITTER",
                                   "PRIO", "CREATED");
      for (const auto& j : *jobs) {
        std::cout << absl::StrFormat(
            "%-17s %-11s %-14s %-24s %-10s %-4d %s\n", j.id(),
            StateName(j.state()) + (j.state() == pb::JOB_QUEUED ? absl::StrCat("#", j.queue_position()) : ""),
            BenchOpName(static_cast<BenchOp>(j.spec().op())), j.spec().name(), j.spec().submitter(),
            j.spec().priority(),
            absl::FormatTime("%Y-%m-%d %H:%M:%S", absl::FromUnixMillis(j.created_unix_ms()), absl::UTCTimeZone()));
      }
    }
    return 0;
  }
  if (action == "variants") {
    pb::BenchOp o = pb::BENCH_OP_UNSPECIFIED;
    if (!op.empty()) {
      auto p = ParseOp(op);
      if (!p.ok()) return Fail(p.status(), 2);
      o = *p;
    }
    auto v = c.ListVariants(o);
    if (!v.ok()) return Fail(v.status(), 1);
    std::cout << "backend " << v->backend() << ", server " << v->server_version() << "\n";
    for (const auto& i : v->variants()) {
      std::cout << absl::StrFormat("  %-14s %-12s %s%s%s\n", BenchOpName(static_cast<BenchOp>(i.op())), i.name(),
                                   i.description(), i.is_default() ? " [default]" : "",
                                   i.test_only() ? " [test only]" : "");
    }
    for (int d = 0; d < v->ceilings_size(); ++d) {
      const auto& ce = v->ceilings(d);
      std::cout << "ceilings: GEMM " << CeilingText(ce.gemm_tflops(), "TFLOP/s");
      if (ce.gemm_tflops() > 0) std::cout << " (" << ce.gemm_desc() << ")";
      if (ce.gemm_fp8_tflops() > 0) std::cout << ", FP8 GEMM " << CeilingText(ce.gemm_fp8_tflops(), "TFLOP/s");
      std::cout << ", copy " << CeilingText(ce.copy_tbps(), "TB/s");
      if (ce.copy_tbps() > 0) std::cout << " (" << ce.copy_desc() << ")";
      std::cout << (ce.note().empty() ? "" : "; " + ce.note()) << "\n";
    }
    return 0;
  }
  if (pos.size() < 2) return Usage(absl::StrCat("jobs ", action, ": give the job id"));
  const std::string id = pos[1];
  if (action == "get") {
    auto j = c.Get(id);
    if (!j.ok()) return Fail(j.status(), 1);
    std::cout << (format == "json" ? ExportJson({*j}) : ExportMarkdown({*j}));
    return 0;
  }
  if (action == "watch") {
    Progress progress;
    auto j = c.Watch(id, [&](const pb::BenchEvent& e) { progress.Event(e); });
    if (!j.ok()) return Fail(j.status(), 1);
    std::cout << ExportMarkdown({*j});
    return j->state() == pb::JOB_DONE ? 0 : 1;
  }
  if (action == "cancel") {
    auto j = c.Cancel(id, reason);
    if (!j.ok()) return Fail(j.status(), 1);
    std::cout << j->id() << " " << StateName(j->state()) << (j->error().empty() ? "" : ": " + j->error()) << "\n";
    return 0;
  }
  return Usage(absl::StrCat("jobs: unknown action \"", action, "\"; give list, get, watch, cancel or variants"));
}

// Draws jobs with the Python package's plotting module (embedded as kReportPy)
// run by `python` on their export JSON. Exit code 3 from the script means
// matplotlib is missing.
int PlotJobs(const std::vector<pb::BenchJob>& jobs, const std::string& python, const std::string& plot,
             const std::string& html) {
  char dir_template[] = "/tmp/kernelctl-plot-XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (dir == nullptr) return Fail(absl::InternalError("export: cannot make a temporary directory"), 1);
  const std::string script = absl::StrCat(dir, "/report.py"), json = absl::StrCat(dir, "/jobs.json");
  absl::Status st = WriteFile(script, kReportPy);
  if (st.ok()) st = WriteFile(json, ExportJson(jobs));
  if (!st.ok()) return Fail(st, 1);
  std::vector<std::string> argv_s = {python, script, "--json=" + json};
  if (!plot.empty()) argv_s.push_back("--plot=" + plot);
  if (!html.empty()) argv_s.push_back("--html=" + html);
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::cout.flush();
  const pid_t pid = fork();
  if (pid == 0) {
    execv(python.c_str(), argv.data());
    _exit(127);
  }
  int wstatus = 0;
  if (pid < 0 || waitpid(pid, &wstatus, 0) < 0) wstatus = 127 << 8;
  unlink(script.c_str());
  unlink(json.c_str());
  rmdir(dir);
  const int rc = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 1;
  if (rc == 0) return 0;
  if (rc == 127) {
    return Fail(absl::FailedPreconditionError(absl::StrCat(
                    "export --plot/--html runs ", python, ", which could not be started; install python3 and "
                    "python3-matplotlib (apt-get install python3-matplotlib) or pass --python=PATH")),
                1);
  }
  if (rc == 3) {
    return Fail(absl::FailedPreconditionError(absl::StrCat(
                    "export --plot/--html needs matplotlib for ", python,
                    ": apt-get install python3-matplotlib, or pass --python=PATH of a Python that has it")),
                1);
  }
  return Fail(absl::InternalError(absl::StrCat("export: the plotting script failed (", python, " exit ", rc, ")")),
              1);
}

int CmdExport(const std::vector<std::string>& args, const ClientOptions& options, bool help) {
  FlagSet f("export");
  std::string format = "json", out, states, submitter, plot, html;
  const char* python_env = std::getenv("KERNELCTL_PYTHON");
  std::string python = python_env != nullptr && *python_env != '\0' ? python_env : "/usr/bin/python3";
  int64_t limit = 100;
  f.String("format", &format, "json|markdown|junit", "output format");
  f.String("out", &out, "FILE", "write here instead of stdout");
  f.String("plot", &plot, "FILE.png|FILE.svg",
           "draw the jobs' results (time, rate vs roofline, gate, clocks) with matplotlib");
  f.String("html", &html, "FILE.html", "one self-contained HTML report: the plots embedded and the table");
  f.String("python", &python, "PATH",
           "the Python that draws --plot/--html; needs matplotlib (default $KERNELCTL_PYTHON or /usr/bin/python3)");
  f.String("state", &states, "S,...", "without ids: only these states");
  f.String("submitter", &submitter, "NAME", "without ids: only this submitter");
  f.Int("limit", &limit, "without ids: newest N (default 100)");
  if (help) {
    PrintUsage("kernelctl export [JOB_ID...] [--format=json|markdown|junit] [--out=FILE] [--plot=FILE.png|svg] "
               "[--html=FILE.html]",
               "Exports finished (and other) jobs with their results. The JSON is what 'kernelctl ci\n"
               "--baseline' reads. --plot and --html draw them (python3 with matplotlib); with either, the\n"
               "--format text is written only with --out.",
               f);
    return 0;
  }
  std::vector<std::string> ids;
  if (absl::Status st = f.Parse(args, &ids); !st.ok()) return Fail(st, 2);
  if (format != "json" && format != "markdown" && format != "junit") {
    return Usage("--format must be json, markdown or junit");
  }
  if (!plot.empty() && !absl::EndsWithIgnoreCase(plot, ".png") && !absl::EndsWithIgnoreCase(plot, ".svg")) {
    return Usage(absl::StrCat("--plot must name a .png or .svg file, got \"", plot, "\""));
  }
  auto client = Connect(options);
  if (!client.ok()) return Fail(client.status(), 1);
  std::vector<pb::BenchJob> jobs;
  if (!ids.empty()) {
    for (const auto& id : ids) {
      auto j = (*client)->Get(id);
      if (!j.ok()) return Fail(j.status(), 1);
      jobs.push_back(*j);
    }
  } else {
    pb::ListBenchRequest req;
    for (absl::string_view s : absl::StrSplit(states, ',', absl::SkipEmpty())) {
      auto st = ParseEnum<pb::BenchJobState>("state", std::string(s), pb::BenchJobState_descriptor(), "JOB_");
      if (!st.ok()) return Fail(st.status(), 2);
      req.add_states(*st);
    }
    req.set_submitter(submitter);
    req.set_limit(static_cast<int32_t>(limit));
    auto l = (*client)->List(req);
    if (!l.ok()) return Fail(l.status(), 1);
    jobs.assign(l->rbegin(), l->rend());  // oldest first
  }
  const std::string text =
      format == "json" ? ExportJson(jobs) : format == "markdown" ? ExportMarkdown(jobs) : ExportJUnit(jobs);
  if (!plot.empty() || !html.empty()) {
    if (!out.empty()) {
      if (absl::Status st = WriteFile(out, text); !st.ok()) return Fail(st, 1);
    }
    return PlotJobs(jobs, python, plot, html);
  }
  if (out.empty()) {
    std::cout << text;
    return 0;
  }
  if (absl::Status st = WriteFile(out, text); !st.ok()) return Fail(st, 1);
  return 0;
}

int CmdCi(const std::vector<std::string>& args, const ClientOptions& options, bool help) {
  FlagSet f("ci");
  std::string suite, baseline, junit = "kernelctl-ci.xml", results, submitter;
  std::optional<double> max_regression;
  f.String("suite", &suite, "FILE", "suite of jobs (JSON or text proto)", true);
  f.String("baseline", &baseline, "RESULTS.json", "results of an earlier run ('kernelctl export --format=json')");
  f.Double("max-regression", &max_regression, "allowed slowdown against the baseline in percent (default 10)");
  f.String("junit", &junit, "FILE", "JUnit XML report (default kernelctl-ci.xml)");
  f.String("results", &results, "FILE", "also write this run's results as JSON (a future baseline)");
  f.String("submitter", &submitter, "NAME", "submitter of the jobs");
  if (help) {
    PrintUsage("kernelctl ci --suite=FILE [--baseline=RESULTS.json --max-regression=PCT] [--junit=FILE]",
               "Runs a suite, writes JUnit XML, prints a markdown table and exits 1 when a variant fails the\n"
               "correctness gate, a job fails, or a variant is slower than the baseline by more than the limit.",
               f);
    return 0;
  }
  if (absl::Status st = f.Parse(args); !st.ok()) return Fail(st, 2);
  const double pct = max_regression.value_or(10.0);
  if (!(pct >= 0)) return Usage("--max-regression must be >= 0");
  auto s = LoadSuite(suite);
  if (!s.ok()) return Fail(s.status(), 2);
  std::optional<std::vector<pb::BenchJob>> base;
  if (!baseline.empty()) {
    auto b = LoadExportJson(baseline);
    if (!b.ok()) return Fail(b.status(), 2);
    base = std::move(*b);
  }
  std::vector<pb::BenchJobSpec> specs(s->jobs().begin(), s->jobs().end());
  for (auto& spec : specs) {
    if (!submitter.empty()) spec.set_submitter(submitter);
  }
  auto client = Connect(options);
  if (!client.ok()) return Fail(client.status(), 1);
  Progress progress;
  auto jobs = RunJobs(**client, specs, progress);
  if (!jobs.ok()) return Fail(jobs.status(), 1);
  const std::vector<CiCheck> checks = CiChecks(*jobs, base ? &*base : nullptr, pct);
  if (absl::Status st = WriteFile(junit, ExportJUnit(s->name(), checks)); !st.ok()) return Fail(st, 1);
  if (!results.empty()) {
    if (absl::Status st = WriteFile(results, ExportJson(*jobs)); !st.ok()) return Fail(st, 1);
  }
  std::cout << ExportMarkdown(*jobs);
  int failed = 0;
  if (base) {
    // A baseline that matches no (job name, variant) of this run gates nothing:
    // say so and fail rather than pass silently (a renamed job, the wrong file).
    int compared = 0;
    for (const auto& c : checks) compared += absl::EndsWith(c.name, " vs baseline") ? 1 : 0;
    if (compared == 0) {
      ++failed;
      std::cout << "FAIL " << s->name() << ": the baseline " << baseline
                << " has no timed result for any job name and variant of this suite\n";
    }
  }
  for (const auto& c : checks) {
    if (c.failed) {
      ++failed;
      std::cout << "FAIL " << c.suite << " / " << c.name << ": " << c.message << "\n";
    }
  }
  std::cout << absl::StrFormat("ci: %d checks, %d failed%s; JUnit in %s\n", checks.size(), failed,
                               base ? absl::StrFormat(" (max regression %.1f%%)", pct) : "", junit);
  return failed > 0 ? 1 : 0;
}

}  // namespace

struct JobSpecFlags::Impl : SpecFlags {};
JobSpecFlags::JobSpecFlags() : impl_(std::make_unique<Impl>()) {}
JobSpecFlags::~JobSpecFlags() = default;
void JobSpecFlags::Define(FlagSet& f) { impl_->Define(f); }
absl::StatusOr<pb::BenchJobSpec> JobSpecFlags::Build() const { return impl_->Build(); }

absl::StatusOr<std::vector<pb::BenchJob>> RunJobsWithProgress(BenchClient& client,
                                                              const std::vector<pb::BenchJobSpec>& specs) {
  Progress progress;
  return RunJobs(client, specs, progress);
}

const std::vector<std::pair<std::string, std::string>>& BenchSubcommands() {
  static const auto* v = new std::vector<std::pair<std::string, std::string>>{
      {"bench", "submit benchmark jobs (flags or a suite), follow them, print a table"},
      {"jobs", "list, get, watch and cancel benchmark jobs; list variants"},
      {"export", "export jobs and results as JSON, markdown or JUnit XML"},
      {"ci", "run a suite as a CI gate (correctness, regressions vs a baseline)"},
      {"submit", "run your own kernel as a benchmark job: build, gate against the oracle, time, rank"},
      {"leaderboard", "rank the passing results of an op per shape (user kernels and built-in variants)"},
  };
  return *v;
}

int RunBenchSubcommand(const std::string& cmd, const std::vector<std::string>& args, const ClientOptions& options,
                       bool help) {
  if (cmd == "bench") return CmdBench(args, options, help);
  if (cmd == "jobs") return CmdJobs(args, options, help);
  if (cmd == "export") return CmdExport(args, options, help);
  if (cmd == "ci") return CmdCi(args, options, help);
  if (cmd == "submit") return CmdSubmit(args, options, help);
  if (cmd == "leaderboard") return CmdLeaderboard(args, options, help);
  return Usage(absl::StrCat("unknown benchmark subcommand \"", cmd, "\""));
}

}  // namespace kernelctl
}  // namespace kernelserve
