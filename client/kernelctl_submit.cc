// kernelctl submit and kernelctl leaderboard: users' own kernels as
// benchmark jobs (server/user_kernels, kernels/api/user_kernel_abi.h).
#include <cstdint>
#include <iostream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/bench_client.h"
#include "client/kernelctl_bench.h"
#include "client/user_kernels.h"

namespace kernelserve {
namespace kernelctl {
namespace {

int Fail(const absl::Status& s, int code) {
  std::cerr << "error: " << s.ToString() << "\n";
  return code;
}

void PrintUsage(const std::string& synopsis, const std::string& about, const FlagSet& f) {
  std::cout << "usage: " << synopsis << "\n\n" << about << "\n\nflags:\n" << f.Usage();
}

// What a user wants to see of their kernel: the verdict, and why.
void PrintUserResults(const pb::BenchJob& job) {
  if (job.state() != pb::JOB_DONE) std::cerr << "job " << job.id() << " failed: " << job.error() << "\n";
  for (const pb::VariantResult& r : job.results()) {
    if (r.source_sha256().empty()) continue;
    std::cerr << r.variant() << " (sha256 " << r.source_sha256() << "): "
              << (r.correct() ? "passed the gate" : "FAILED the gate") << ": " << r.gate_message() << "\n";
    if (!r.correct() && !r.build_log().empty()) std::cerr << "build log:\n" << r.build_log() << "\n";
  }
}

}  // namespace

int CmdSubmit(const std::vector<std::string>& args, const ClientOptions& options, bool help) {
  FlagSet f("submit");
  JobSpecFlags sf;
  sf.Define(f);
  std::string kernel, baseline, flags, kernel_name, backend, format = "markdown";
  std::string grid, block;
  int64_t shared_bytes = 0;
  f.String("kernel", &kernel, "FILE",
           "your kernel: C++ (cpu), CUDA C++ (cuda, .cu) or HIP C++ (hip, .hip) source, a built .so, (cuda) a "
           ".cubin or .ptx, or (hip) an AMD GPU code object (.hsaco)",
           true);
  f.String("grid", &grid, "X[,Y[,Z]]", "device code's grid: a cubin's, PTX's, code object's or HIP source's (required)");
  f.String("block", &block, "X[,Y[,Z]]", "device code's block (a workgroup on hip; required for device code)");
  f.Int("shared-mem", &shared_bytes, "device code's dynamic shared memory (LDS on hip), bytes");
  f.String("baseline", &baseline, "A,B,...", "built-in variants to run beside it (e.g. cpu, cuda, oracle)");
  f.String("kernel-flags", &flags, "F,...", "compile flags from the server's allow-list (-O3,-march=native,...)");
  f.String("kernel-name", &kernel_name, "NAME", "the variant is user:NAME (default: the file's stem)");
  f.String("kernel-backend", &backend, "cpu|cuda|hip", "the kernel's backend (default: the server's; hip for a .hip file)");
  f.String("output", &format, "markdown|json", "what to print when the job finishes");
  if (help) {
    PrintUsage("kernelctl submit --op=OP --kernel=FILE [shape flags] [--baseline=cpu] [flags]",
               "Sends your kernel (kernels/api/user_kernel_abi.h) to the server, which builds it, runs it in a\n"
               "worker process of its own on inputs from a secret seed, checks it against the fp64 oracle, times it\n"
               "beside the baseline variants and ranks them. The compile log comes back when it does not build.",
               f);
    return 0;
  }
  if (absl::Status st = f.Parse(args); !st.ok()) return Fail(st, 2);
  if (format != "markdown" && format != "json") return Fail(absl::InvalidArgumentError("--output: markdown or json"), 2);
  auto spec = sf.Build();
  if (!spec.ok()) return Fail(spec.status(), 2);
  std::vector<std::string> flag_list = absl::StrSplit(flags, ',', absl::SkipEmpty());
  auto k = UserKernelFromFile(kernel, kernel_name, flag_list, backend);
  if (!k.ok()) return Fail(k.status(), 2);
  if (!grid.empty() || !block.empty() || f.IsSet("shared-mem")) {
    // Three dimensions each; the server checks the ranges and names the field.
    auto dims = [](const std::string& text, uint32_t out[3]) {
      out[0] = 0, out[1] = 1, out[2] = 1;
      int i = 0;
      for (absl::string_view d : absl::StrSplit(text, ',')) {
        if (i == 3 || !absl::SimpleAtoi(d, &out[i++])) return false;
      }
      return true;
    };
    uint32_t g[3], b[3];
    if (!dims(grid, g) || !dims(block, b) || shared_bytes < 0 || shared_bytes > UINT32_MAX) {
      return Fail(absl::InvalidArgumentError("--grid, --block: X[,Y[,Z]] (unsigned); --shared-mem: bytes >= 0"), 2);
    }
    pb::CudaLaunch* l = k->mutable_launch();
    l->set_grid_x(g[0]), l->set_grid_y(g[1]), l->set_grid_z(g[2]);
    l->set_block_x(b[0]), l->set_block_y(b[1]), l->set_block_z(b[2]);
    l->set_dynamic_shared_bytes(static_cast<uint32_t>(shared_bytes));
  }
  spec->clear_variants();
  for (absl::string_view b : absl::StrSplit(baseline, ',', absl::SkipEmpty())) spec->add_variants(std::string(b));
  if (!f.IsSet("name")) spec->set_name(absl::StrCat(spec->name(), " ", k->name()));
  *spec->add_user_kernels() = *k;
  auto client = BenchClient::Connect(options);
  if (!client.ok()) return Fail(client.status(), 1);
  auto jobs = RunJobsWithProgress(**client, {*spec});
  if (!jobs.ok()) return Fail(jobs.status(), 1);
  std::cout << (format == "json" ? ExportJson(*jobs) : ExportMarkdown(*jobs));
  PrintUserResults(jobs->front());
  if (jobs->front().state() != pb::JOB_DONE) return 1;
  for (const pb::VariantResult& r : jobs->front().results()) {
    if (!r.correct()) return 1;
  }
  return 0;
}

int CmdLeaderboard(const std::vector<std::string>& args, const ClientOptions& options, bool help) {
  FlagSet f("leaderboard");
  JobSpecFlags sf;  // --op and the shape flags, as for submit
  sf.Define(f);
  bool builtin = false, json = false;
  int64_t limit = 0;
  f.Bool("builtin", &builtin, "rank the server's own variants too, for reference");
  f.Bool("json", &json, "print JSON instead of a table");
  f.Int("entries", &limit, "entries per shape and device (default 20)");
  if (help) {
    PrintUsage("kernelctl leaderboard --op=OP [shape flags as for submit] [--builtin] [--json]",
               "Ranks users' kernels of OP (BenchService.Leaderboard): over the finished jobs you can see (an admin\n"
               "sees every tenant's), the results that passed the correctness gate and were timed, the best time per\n"
               "kernel and source hash, fastest first, per shape and device. Shape flags (--batch, --heads, --seq,\n"
               "...) pick one shape, with submit's defaults for the others; without them every shape is shown.",
               f);
    return 0;
  }
  if (absl::Status st = f.Parse(args); !st.ok()) return Fail(st, 2);
  auto spec = sf.Build();
  if (!spec.ok()) return Fail(spec.status(), 2);
  pb::LeaderboardRequest req;
  req.set_op(spec->op());
  req.set_include_builtin(builtin);
  req.set_limit(static_cast<int32_t>(limit));
  bool shape_given = false;
  for (const char* name : {"batch", "heads", "heads-kv", "seq", "seq-kv", "head-dim", "head-dim-v", "causal", "layout",
                           "round", "softmax-scale", "format", "p-mode", "hadamard", "q-len", "kv-format",
                           "num-splits", "page-size", "tokens", "experts", "top-k", "hidden", "inter", "out-dim",
                           "swiglu", "weighted-sum"}) {
    shape_given = shape_given || f.IsSet(name);
  }
  if (shape_given) {
    if (spec->has_attention()) *req.mutable_attention() = spec->attention();
    if (spec->has_mla()) *req.mutable_mla() = spec->mla();
    if (spec->has_moe()) *req.mutable_moe() = spec->moe();
  }
  auto client = BenchClient::Connect(options);
  if (!client.ok()) return Fail(client.status(), 1);
  auto board = (*client)->Leaderboard(req);
  if (!board.ok()) return Fail(board.status(), 1);
  std::cout << (json ? LeaderboardJson(*board) : LeaderboardMarkdown(*board));
  return 0;
}

}  // namespace kernelctl
}  // namespace kernelserve
