#include "server/bench/job_run.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "kernels/numerics/numerics.h"

namespace kernelserve {
namespace bench {
namespace {

double NowS() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Progress of a job: the gate runs from kGateStart for kGateShare, the
// timing takes the rest.
constexpr double kGateStart = 0.03;
constexpr double kGateShare = 0.1;
// Launches run in pieces of about this long, with a cancellation and
// time-limit check between them: a long job must not hold the device past a
// Cancel.
constexpr double kStopCheckS = 0.1;

// Runs `fn` on its own thread and waits, polling `stop` every 20 ms so that a
// cancelled job is not held up by a long host computation (the thread is
// left to finish on its own; it owns what it touches).
absl::Status RunStoppable(std::function<absl::Status()> fn, const std::function<absl::Status()>& stop) {
  struct Shared {
    absl::Mutex mu;
    bool done = false;
    absl::Status status;
  };
  auto shared = std::make_shared<Shared>();
  std::thread t([shared, fn = std::move(fn)] {
    absl::Status st = fn();
    absl::MutexLock l(&shared->mu);
    shared->status = st;
    shared->done = true;
  });
  while (true) {
    {
      absl::MutexLock l(&shared->mu);
      if (shared->mu.AwaitWithTimeout(absl::Condition(&shared->done), absl::Milliseconds(20))) {
        t.join();
        return shared->status;
      }
    }
    absl::Status st = stop();
    if (!st.ok()) {
      t.detach();
      return st;
    }
  }
}

// Every input view of a call; those an op does not use are empty.
std::vector<TensorView*> Views(OpCall& c) {
  return {&c.q,
          &c.k,
          &c.v,
          &c.fp8_in.q,
          &c.fp8_in.k,
          &c.fp8_in.v,
          &c.fp8_in.q_descale,
          &c.fp8_in.k_descale,
          &c.fp8_in.v_descale,
          &c.mla_in.q_lat,
          &c.mla_in.q_pe,
          &c.mla_in.kv,
          &c.mla_in.seq_lens,
          &c.mla_in.kv_indices,
          &c.mla_in.kv_indptr,
          &c.mla_in.q_lens,
          &c.moe_in.x,
          &c.moe_in.topk_ids,
          &c.moe_in.topk_weights,
          &c.moe_in.w13,
          &c.moe_in.w13_scales,
          &c.moe_in.w2,
          &c.moe_in.w2_scales};
}

}  // namespace

// What the run holds on the host. Host variants and the oracle run on their
// own threads, which keep it alive after a cancelled run.
struct JobRun::HostState {
  std::shared_ptr<PreparedJob> prepared;
  HostTensor out;
};

// What the run holds on the device, freed (and the reservation released)
// when the run ends, however it ends.
struct JobRun::DeviceState {
  std::shared_ptr<void> reservation;  // declared first: released after the memory below is freed
  std::vector<std::unique_ptr<DeviceMemory>> inputs;
  OpCall call;  // the job's call with views into `inputs`
  std::unique_ptr<DeviceMemory> out;
  TensorView out_view;
  std::unique_ptr<DeviceMemory> flush_src, flush_dst;
  size_t flush_bytes = 0;
};

JobRun::MethodPlan JobRun::PlanMethod(const pb::MethodOptions& m, const BenchOptions& options) {
  MethodPlan p;
  p.method = m.method() == pb::BENCH_METHOD_UNSPECIFIED ? pb::METHOD_KERNEL : m.method();
  p.warmup = m.warmup() > 0 ? m.warmup() : 500;
  p.iters = m.iters() > 0 ? m.iters() : 100;
  p.passes = p.method == pb::METHOD_PASSES ? (m.passes() > 0 ? m.passes() : 5) : 1;
  p.replays = m.graph_replays() > 0 ? m.graph_replays() : p.iters;
  p.warmin_s = std::max(m.warmin_s(), options.min_warmin_s);
  p.window_s = std::max(m.window_s(), options.min_window_s);
  p.l2_flush = m.l2_flush();
  switch (p.method) {
    case pb::METHOD_PASSES:
      p.name = absl::StrCat("passes (", p.passes, " x ", p.iters, ")");
      break;
    case pb::METHOD_SUSTAINED:
      p.name = absl::StrFormat("sustained (%.3g s warm-in, %.3g s window)", p.warmin_s, p.window_s);
      break;
    case pb::METHOD_GRAPH:
      p.name = absl::StrCat("graph (", p.warmup, " warm-up launches, ", p.replays, " replays)");
      break;
    default:
      p.name = absl::StrCat("kernel (", p.warmup, " warm-up, ", p.iters, " timed)");
  }
  return p;
}

JobRun::JobRun(const JobRunEnv& env, JobSink* sink, pb::BenchJobSpec spec, std::string job_id, std::string tenant,
               int device)
    : env_(env),
      sink_(sink),
      spec_(std::move(spec)),
      job_id_(std::move(job_id)),
      tenant_(std::move(tenant)),
      device_(device),
      caps_(env.backend->Capabilities()),
      plan_(PlanMethod(spec_.method(), *env.options)),
      limit_s_(spec_.time_limit_s() > 0 ? spec_.time_limit_s() : env.options->default_time_limit_s),
      deadline_s_(NowS() + limit_s_) {}

JobRun::~JobRun() = default;

absl::Status JobRun::Run() {
  KS_RETURN_IF_ERROR(ResolveVariants());
  KS_RETURN_IF_ERROR(PrepareInputs());
  KS_RETURN_IF_ERROR(Stop());
  KS_RETURN_IF_ERROR(BuildUserKernels());
  KS_RETURN_IF_ERROR(Stop());
  KS_RETURN_IF_ERROR(EnsureCeilings());
  KS_RETURN_IF_ERROR(UploadInputs());
  KS_RETURN_IF_ERROR(Stop());
  KS_RETURN_IF_ERROR(ComputeReference());
  KS_RETURN_IF_ERROR(Gate());
  KS_RETURN_IF_ERROR(OnDevice([this] { return TimeWindow(); }));
  Rank();
  return absl::OkStatus();
}

// ------------------------------------------------------------------ helpers

absl::Status JobRun::OnDevice(std::function<absl::Status()> fn) {
  // A full device queue is not a failure of the job: wait for room.
  while (true) {
    absl::Status st = (*env_.runner)(device_, fn);
    if (st.code() != absl::StatusCode::kResourceExhausted || !absl::StrContains(st.message(), "queue")) return st;
    if (!sink_->Cancelled().ok()) return st;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

absl::Status JobRun::Stop() const {
  KS_RETURN_IF_ERROR(sink_->Cancelled());
  if (NowS() > deadline_s_) return absl::DeadlineExceededError(absl::StrFormat("time limit of %g s exceeded", limit_s_));
  return absl::OkStatus();
}

void JobRun::Note(pb::BenchPhase phase, std::string message, double progress) {
  pb::BenchEvent e;
  e.set_phase(phase);
  e.set_message(std::move(message));
  e.set_progress(progress);
  sink_->Emit(std::move(e));
}

void JobRun::Progress(pb::BenchPhase phase, size_t i, int pass, std::string message) {
  const double steps = static_cast<double>(std::max<size_t>(1, timed_.size()) * plan_.passes);
  pb::BenchEvent e;
  e.set_phase(phase);
  e.set_variant(runs_[i].variant->name);
  e.set_pass(pass);
  e.set_passes(plan_.passes);
  e.set_progress(kGateStart + kGateShare + (1.0 - kGateStart - kGateShare) * step_ / steps);
  e.set_message(std::move(message));
  sink_->Emit(std::move(e));
}

void JobRun::Report(size_t i, pb::BenchEvent event, const std::string& note) {
  VariantRun& run = runs_[i];
  event.set_phase(pb::PHASE_RESULT);
  event.set_variant(run.variant->name);
  *event.mutable_result() = run.result;
  run.reported = true;
  sink_->AddResult(run.result, std::move(event), note);
}

// ------------------------------------------------------- inputs, ceilings

absl::Status JobRun::ResolveVariants() {
  const BenchOp op = static_cast<BenchOp>(spec_.op());
  for (const std::string& name : spec_.variants()) {
    KS_ASSIGN_OR_RETURN(const Variant* v, env_.variants->Find(op, name));
    runs_.push_back(VariantRun{v});
  }
  for (const pb::UserKernel& k : spec_.user_kernels()) {
    auto u = std::make_unique<UserRun>();
    u->kernel = k;
    u->variant = std::make_unique<Variant>();
    u->variant->op = op;
    u->variant->name = user_kernels::UserVariantName(k);
    u->variant->backend = env_.backend->Name();
    u->variant->description =
        absl::StrCat("user kernel", k.filename().empty() ? "" : absl::StrCat(" ", k.filename()),
                     k.code_case() == pb::UserKernel::kSharedObject ? " (prebuilt)"
                     : k.code_case() == pb::UserKernel::kCubin      ? " (prebuilt cubin)"
                     : k.code_case() == pb::UserKernel::kPtx        ? " (PTX)"
                     : k.code_case() == pb::UserKernel::kCodeObject ? " (prebuilt code object)"
                                                                    : "",
                     ", in its own worker process");
    runs_.push_back(VariantRun{u->variant.get(), u.get()});
    users_.push_back(std::move(u));
  }
  KS_ASSIGN_OR_RETURN(const BenchOpEntry* entry, BenchOpOf(spec_));
  tolerance_ = spec_.tolerance() > 0 ? spec_.tolerance() : entry->DefaultTolerance();
  return absl::OkStatus();
}

absl::Status JobRun::PrepareInputs() {
  Note(pb::PHASE_NOTE, "preparing inputs", 0.0);
  pb::BenchJobSpec spec = spec_;
  if (!users_.empty()) {
    // A user kernel must not be able to return answers it computed before:
    // its inputs (and so every variant's in this job) come from a seed that
    // is fresh per run and never reported (KernelBot does the same).
    std::random_device rd;
    secret_seed_ = (static_cast<uint64_t>(rd()) << 32 | rd()) | 1;
    spec.mutable_inputs()->set_seed(secret_seed_);
    sink_->AddNote("inputs generated from a secret seed, fresh for this run (the job has user kernels)");
  }
  KS_ASSIGN_OR_RETURN(std::unique_ptr<PreparedJob> prepared, PrepareJob(spec, *env_.reader, tenant_));
  host_ = std::make_shared<HostState>();
  host_->prepared = std::move(prepared);
  const TensorDesc out = host_->prepared->host_call.OutputDesc();
  host_->out = HostTensor(out.dtype, out.shape);
  return absl::OkStatus();
}

// Each user kernel's shared object, from the build cache or compiled now, in
// a sandboxed child process (server/user_kernels/builder.h).
absl::Status JobRun::BuildUserKernels() {
  for (const std::unique_ptr<UserRun>& u : users_) {
    if (env_.builder == nullptr) return absl::FailedPreconditionError("this server runs no user kernels");
    const std::string& name = u->variant->name;
    Note(pb::PHASE_NOTE,
         u->kernel.code_case() == pb::UserKernel::kSource ? absl::StrCat("building ", name) : absl::StrCat("storing ", name),
         0.01);
    absl::StatusOr<user_kernels::BuiltKernel> built =
        env_.builder->Build(u->kernel, env_.backend->Name(), [this] { return !Stop().ok(); });
    KS_RETURN_IF_ERROR(Stop());
    if (!built.ok()) return absl::Status(built.status().code(), absl::StrCat(name, ": ", built.status().message()));
    u->built = std::move(*built);
    if (u->built.cached) sink_->AddNote(absl::StrCat(name, ": build cache hit (", u->built.build_key.substr(0, 16), ")"));
  }
  return absl::OkStatus();
}

absl::Status JobRun::EnsureCeilings() {
  std::optional<pb::DeviceCeilings> known = env_.ceilings->Get(device_);
  if (!known) {
    Note(pb::PHASE_NOTE, "measuring the device's GEMM and copy ceilings (once per device)", 0.01);
    // Cancellable between GEMM runs: a job cancelled meanwhile stops at once
    // (with its own reason), and the next job measures again.
    pb::DeviceCeilings measured;
    const absl::Status st = OnDevice([&]() -> absl::Status {
      KS_ASSIGN_OR_RETURN(measured, MeasureCeilings(*env_.backend, device_, env_.options->gemm_tflops,
                                                    env_.options->gemm_fp8_tflops, [this] { return !Stop().ok(); }));
      return absl::OkStatus();
    });
    KS_RETURN_IF_ERROR(Stop());
    KS_RETURN_IF_ERROR(st);
    env_.ceilings->Put(device_, measured);
    known = measured;
  }
  ceilings_ = *known;
  sink_->SetCeilings(ceilings_, host_->prepared->shape_desc);
  return absl::OkStatus();
}

// --------------------------------------------------------------- upload

absl::Status JobRun::UploadInputs() {
  dev_ = std::make_unique<DeviceState>();
  dev_->call = host_->prepared->host_call;
  if (plan_.l2_flush) {
    dev_->flush_bytes = static_cast<size_t>(FlushBytes(caps_));
    if (dev_->flush_bytes == 0) {
      sink_->AddNote(absl::StrCat("l2_flush: backend ", env_.backend->Name(), " reports no cache to flush"));
    }
  }
  KS_RETURN_IF_ERROR(ReserveMemory());
  return OnDevice([this] { return CopyInputsToDevice(); });
}

// The inputs, the output and the flush buffers, accounted against the
// device's and the tenant's memory limits for as long as the run holds them.
absl::Status JobRun::ReserveMemory() {
  if (!env_.options->reserve_memory) return absl::OkStatus();
  int64_t bytes = std::max<int64_t>(1, host_->out.num_bytes()) + 2 * static_cast<int64_t>(dev_->flush_bytes);
  int64_t in_bytes = 0;
  for (const auto& [name, t] : host_->prepared->tensors) in_bytes += std::max<int64_t>(1, t.num_bytes());
  // Each user kernel's worker holds its own copy of the inputs and output.
  bytes += in_bytes + static_cast<int64_t>(users_.size()) *
                         (in_bytes + host_->out.num_bytes() + 2 * static_cast<int64_t>(dev_->flush_bytes));
  const std::string what =
      absl::StrCat("benchmark job ", job_id_, " (inputs and output", dev_->flush_bytes > 0 ? ", L2 flush buffers" : "",
                   users_.empty() ? "" : ", user kernel workers' copies", ")");
  KS_ASSIGN_OR_RETURN(dev_->reservation, env_.options->reserve_memory(device_, tenant_, bytes, what));
  return absl::OkStatus();
}

absl::Status JobRun::CopyInputsToDevice() {
  Backend& be = *env_.backend;
  std::map<const void*, void*> moved;
  for (const auto& [name, t] : host_->prepared->tensors) {
    KS_ASSIGN_OR_RETURN(std::unique_ptr<DeviceMemory> m,
                        be.Allocate(device_, std::max<size_t>(1, static_cast<size_t>(t.num_bytes()))));
    KS_RETURN_IF_ERROR(be.CopyToDevice(device_, m->data(), t.bytes(), static_cast<size_t>(t.num_bytes())));
    moved[t.bytes()] = m->data();
    dev_->inputs.push_back(std::move(m));
  }
  for (TensorView* v : Views(dev_->call)) {
    if (v->data == nullptr) continue;
    auto it = moved.find(v->data);
    if (it == moved.end()) return absl::InternalError("an input view points outside the job's tensors");
    v->data = it->second;
  }
  const TensorDesc out = host_->out.desc();
  KS_ASSIGN_OR_RETURN(dev_->out, be.Allocate(device_, std::max<size_t>(1, static_cast<size_t>(out.num_bytes()))));
  dev_->out_view = TensorView{out, dev_->out->data()};
  if (dev_->flush_bytes > 0) {
    KS_ASSIGN_OR_RETURN(dev_->flush_src, be.Allocate(device_, dev_->flush_bytes));
    KS_ASSIGN_OR_RETURN(dev_->flush_dst, be.Allocate(device_, dev_->flush_bytes));
  }
  return be.Synchronize(device_);
}

// ------------------------------------------------------------ the gate

// Large problems are checked on an exact sample of the output.
absl::Status JobRun::ComputeReference() {
  const double max_flops = env_.options->max_gate_flops;
  const bool sampled = host_->prepared->flops > max_flops;
  Note(pb::PHASE_CHECKING,
       sampled ? "computing the fp64 oracle reference on a sample of the output" : "computing the fp64 oracle reference",
       0.02);
  auto reference = std::make_shared<OracleSample>();
  std::shared_ptr<const PreparedJob> prepared = host_->prepared;
  KS_RETURN_IF_ERROR(RunStoppable(
      [prepared, reference, sampled, max_flops]() -> absl::Status {
        if (sampled) {
          KS_ASSIGN_OR_RETURN(*reference, prepared->op->ReferenceSample(prepared->host_call, max_flops));
        } else {
          KS_ASSIGN_OR_RETURN(reference->reference, prepared->op->Reference(prepared->host_call));
        }
        return absl::OkStatus();
      },
      [this] { return Stop(); }));
  reference_ = std::move(reference);
  sampled_ = sampled;
  if (sampled_) {
    sink_->AddNote(absl::StrCat("correctness gate on ", reference_->desc, " (", reference_->index.size(),
                                " outputs; the full fp64 reference exceeds ", max_flops, " FLOPs)"));
  }
  return absl::OkStatus();
}

// One launch of each variant, compared with the reference.
absl::Status JobRun::Gate() {
  poison_.assign(static_cast<size_t>(host_->out.num_bytes()), 0xFF);  // bf16 NaN
  for (size_t i = 0; i < runs_.size(); ++i) {
    StartResult(i);
    const Variant& v = *runs_[i].variant;
    pb::BenchEvent e;
    e.set_phase(pb::PHASE_CHECKING);
    e.set_variant(v.name);
    e.set_message(absl::StrCat("checking ", v.name, " against the fp64 oracle"));
    e.set_progress(kGateStart + kGateShare * static_cast<double>(i) / static_cast<double>(runs_.size()));
    sink_->Emit(std::move(e));
    const double t0 = NowS();
    absl::Status ran;
    if (runs_[i].user != nullptr) {
      ran = GateLaunchUser(i);
      if (!ran.ok()) {
        // The kernel itself failed (build, load, fault, hang): the job fails
        // with the reason, and its result says it too.
        KS_RETURN_IF_ERROR(Stop());
        KS_RETURN_IF_ERROR(Judge(i, ran));
        pb::BenchEvent failed;
        failed.set_message(absl::StrCat(v.name, " failed: ", ran.ToString()));
        Report(i, std::move(failed), "");
        return ran;
      }
    } else if (v.on_host) {
      ran = GateLaunchOnHost(i);
      if (absl::IsCancelled(ran) || absl::IsDeadlineExceeded(ran)) return ran;
    } else {
      ran = GateLaunchOnDevice(i);
    }
    runs_[i].gate_s = NowS() - t0;
    KS_RETURN_IF_ERROR(Judge(i, ran));
    if (!runs_[i].result.correct()) {
      pb::BenchEvent failed;
      failed.set_message(absl::StrCat(v.name, " failed the correctness gate: ", runs_[i].result.gate_message()));
      Report(i, std::move(failed), "");
    }
    KS_RETURN_IF_ERROR(Stop());
  }
  return absl::OkStatus();
}

void JobRun::StartResult(size_t i) {
  const Variant& v = *runs_[i].variant;
  pb::VariantResult& r = runs_[i].result;
  r.set_variant(v.name);
  r.set_backend(v.backend);
  r.set_description(v.description);
  r.set_tolerance(tolerance_);
  r.set_flops(host_->prepared->flops);
  r.set_bytes(host_->prepared->bytes);
  if (runs_[i].user != nullptr) {
    r.set_source_sha256(runs_[i].user->built.source_sha256);
    r.set_build_log(runs_[i].user->built.log);
  }
}

// The user kernel's worker: started here (it generates the inputs from the
// secret seed and loads the kernel), one poisoned launch, its output back.
absl::Status JobRun::GateLaunchUser(size_t i) {
  UserRun& u = *runs_[i].user;
  std::memcpy(host_->out.bytes(), poison_.data(), poison_.size());
  // The worker runs on the device the job was placed on, which an `any` spec does not name.
  pb::BenchJobSpec placed = spec_;
  placed.set_device(device_);
  absl::StatusOr<std::unique_ptr<user_kernels::KernelWorker>> started = user_kernels::KernelWorker::Start(
      env_.builder->options(), env_.backend->Name(), u.built, placed, secret_seed_, u.variant->name,
      [this] { return !Stop().ok(); });
  if (!started.ok()) return CheckDeviceAfter(started.status());
  u.worker = std::move(*started);
  sink_->AddNote(absl::StrCat(u.variant->name, ": worker ", u.worker->network()));
  return CheckDeviceAfter(u.worker->Gate(host_->out.bytes(), poison_.size()));
}

// A worker that died abnormally may have left the device broken: probe it
// (the server marks it unhealthy when the probe fails) and say so in the notes.
absl::Status JobRun::CheckDeviceAfter(absl::Status st) {
  const std::string fault = user_kernels::WorkerFault(st);
  if (fault.empty() || !env_.options->probe_after_fault) return st;
  const absl::Status probe = env_.options->probe_after_fault(device_, st);
  sink_->AddNote(probe.ok() ? absl::StrCat("device ", device_, " passed its health probe after the worker's ", fault)
                            : absl::StrCat("device ", device_, " failed its health probe after the worker's ", fault,
                                           " and is marked unhealthy: ", probe.message()));
  return st;
}

// The deadline of a worker command that runs `launches` launches (and
// `extra_s` besides): the launch deadline plus 10x their time at the
// gate's pace, within the job's time limit.
double JobRun::UserTimeout(size_t i, int64_t launches, double extra_s) const {
  const double per = std::max(runs_[i].gate_s, 1e-3);
  return std::max(1.0, std::min(deadline_s_ - NowS(), env_.builder->options().launch_deadline_s + extra_s +
                                                          10.0 * per * static_cast<double>(launches)));
}

absl::StatusOr<user_kernels::WorkerTimes> JobRun::UserLaunches(size_t i, int warmup, int timed, int batches) {
  // With l2_flush the worker flushes before each launch with buffers of the
  // same size as the built-in variants' (allowing 1 GB/s for the copies).
  const uint64_t flush = plan_.l2_flush && dev_ != nullptr ? dev_->flush_bytes : 0;
  const double timeout = UserTimeout(i, warmup + timed, 10.0 * (warmup + timed) * static_cast<double>(flush) * 1e-9);
  runs_[i].timer = Timer::kWorkerClock;
  absl::StatusOr<user_kernels::WorkerTimes> t = runs_[i].user->worker->Time(warmup, timed, batches, flush, timeout);
  if (!t.ok()) return CheckDeviceAfter(t.status());
  return t;
}

absl::Status JobRun::GateLaunchOnHost(size_t i) {
  std::memcpy(host_->out.bytes(), poison_.data(), poison_.size());
  // The thread may outlive a cancelled run: it holds the host state, and the
  // variant and backend outlive every run.
  std::shared_ptr<HostState> host = host_;
  const Variant* v = runs_[i].variant;
  Backend* backend = env_.backend;
  const int device = device_;
  return RunStoppable(
      [host, v, backend, device]() -> absl::Status {
        TensorView out = host->out.view();
        return v->run(*backend, device, host->prepared->host_call, out);
      },
      [this] { return Stop(); });
}

absl::Status JobRun::GateLaunchOnDevice(size_t i) {
  return OnDevice([this, i]() -> absl::Status {
    Backend& be = *env_.backend;
    KS_RETURN_IF_ERROR(be.CopyToDevice(device_, dev_->out_view.data, poison_.data(), poison_.size()));
    KS_RETURN_IF_ERROR(runs_[i].variant->run(be, device_, dev_->call, dev_->out_view));
    KS_RETURN_IF_ERROR(be.Synchronize(device_));
    return be.CopyToHost(device_, host_->out.bytes(), dev_->out_view.data, poison_.size());
  });
}

// The verdict on the output of the gate launch (`ran`: how that went).
absl::Status JobRun::Judge(size_t i, const absl::Status& ran) {
  pb::VariantResult& r = runs_[i].result;
  if (!ran.ok()) {
    r.set_correct(false);
    r.set_error_message(ran.ToString());
    r.set_gate_message(absl::StrCat("the variant failed to run: ", ran.ToString()));
    return absl::OkStatus();
  }
  std::vector<double> got = numerics::ToDoubles(host_->out.view());
  // NaN/Inf anywhere fails, sampled or not.
  int64_t nan = 0;
  for (double x : got) nan += std::isfinite(x) ? 0 : 1;
  const size_t total = got.size();
  if (sampled_) {
    std::vector<double> sub(reference_->index.size());
    for (size_t k = 0; k < sub.size(); ++k) sub[k] = got[static_cast<size_t>(reference_->index[k])];
    got = std::move(sub);
  }
  const std::vector<double>& ref = reference_->reference;
  if (got.size() != ref.size()) return absl::InternalError("the oracle reference has the wrong size");
  numerics::ErrorMetrics m = numerics::CompareToReference(got.data(), ref.data(), static_cast<int64_t>(got.size()));
  r.mutable_error()->set_rel_rms(m.rel_rms);
  r.mutable_error()->set_max_abs(m.max_abs);
  r.mutable_error()->set_nonfinite(std::max<int64_t>(m.nonfinite, nan));
  if (nan > 0 || m.nonfinite > 0) {
    r.set_correct(false);
    r.set_gate_message(absl::StrCat(std::max<int64_t>(nan, m.nonfinite), " of ", total, " outputs are NaN or Inf"));
  } else if (!(m.rel_rms <= tolerance_)) {
    r.set_correct(false);
    r.set_gate_message(absl::StrFormat("rel_rms %.4g exceeds the tolerance %.4g", m.rel_rms, tolerance_));
  } else {
    r.set_correct(true);
    r.set_gate_message(absl::StrFormat("rel_rms %.4g <= %.4g", m.rel_rms, tolerance_));
  }
  if (sampled_) absl::StrAppend(r.mutable_gate_message(), " (on a sample: ", reference_->desc, ")");
  return absl::OkStatus();
}

// ------------------------------------------------------------- timing

absl::Status JobRun::TimeWindow() {
  for (size_t i = 0; i < runs_.size(); ++i) {
    if (runs_[i].result.correct()) timed_.push_back(i);
  }
  if (!users_.empty() && plan_.l2_flush && dev_->flush_bytes > 0) {
    sink_->AddNote(absl::StrCat("l2_flush: each user kernel's worker copies ", dev_->flush_bytes >> 20,
                                " MiB between two buffers of its own before each launch, as for the built-in "
                                "variants"));
  }
  if (!users_.empty() && plan_.method == pb::METHOD_SUSTAINED) {
    sink_->AddNote("sustained: user kernels run their warm-in and window in their worker process, in batches of "
                   "about 20 ms timed there");
  }
  if (!users_.empty() && plan_.method == pb::METHOD_GRAPH) {
    sink_->AddNote("graph: user kernels are captured into a graph and replayed in their worker process");
  }
  switch (plan_.method) {
    case pb::METHOD_PASSES:
      return TimePasses();
    case pb::METHOD_GRAPH:
      return TimeGraph();
    case pb::METHOD_SUSTAINED:
      return TimeSustained();
    default:
      return TimeKernel();
  }
}

// Host variants (the oracle) are slow: few launches, no warm-up.
JobRun::Counts JobRun::LaunchCounts(size_t i) const {
  if (runs_[i].variant->on_host) {
    const int n = runs_[i].gate_s > 5 ? 1 : std::min(plan_.iters, env_.options->max_host_launches);
    return {0, std::max(1, n)};
  }
  return {plan_.warmup, plan_.method == pb::METHOD_GRAPH ? plan_.replays : plan_.iters};
}

absl::Status JobRun::Launch(size_t i) {
  if (runs_[i].user != nullptr) return UserLaunches(i, 0, 1, 1).status();
  const Variant& v = *runs_[i].variant;
  if (v.on_host) {
    TensorView out = host_->out.view();
    return v.run(*env_.backend, device_, host_->prepared->host_call, out);
  }
  return v.run(*env_.backend, device_, dev_->call, dev_->out_view);
}

absl::Status JobRun::Sync(size_t i) {
  return runs_[i].variant->on_host ? absl::OkStatus() : env_.backend->Synchronize(device_);
}

absl::Status JobRun::Flush() {
  if (!plan_.l2_flush || dev_->flush_bytes == 0) return absl::OkStatus();
  KS_RETURN_IF_ERROR(
      env_.backend->CopyOnDevice(device_, dev_->flush_dst->data(), dev_->flush_src->data(), dev_->flush_bytes));
  return env_.backend->Synchronize(device_);
}

absl::Status JobRun::Warm(size_t i, int launches) {
  if (runs_[i].user != nullptr) return launches > 0 ? UserLaunches(i, launches, 0, 1).status() : absl::OkStatus();
  double last_check = NowS();
  for (int k = 0; k < launches; ++k) {
    // Queued launches run asynchronously: check at least every ~0.1 s of host time.
    if (k % 16 == 0 || NowS() - last_check > kStopCheckS) {
      KS_RETURN_IF_ERROR(Stop());
      last_check = NowS();
    }
    KS_RETURN_IF_ERROR(Flush());
    KS_RETURN_IF_ERROR(Launch(i));
  }
  return Sync(i);
}

// `launches` back to back; *ms: their total. Device events where the backend
// has a device timer, else the host clock around the launches and one
// synchronisation (a host backend; host variants).
absl::Status JobRun::TimedRun(size_t i, int launches, double* ms) {
  VariantRun& run = runs_[i];
  if (caps_.device_timer && !run.variant->on_host) {
    KS_ASSIGN_OR_RETURN(const double per,
                        env_.backend->TimeLaunches(device_, [this, i] { return Launch(i); }, launches));
    run.timer = Timer::kDeviceEvents;
    *ms = per * launches;
    return absl::OkStatus();
  }
  run.timer = Timer::kHostClock;
  const double t0 = NowS();
  for (int k = 0; k < launches; ++k) KS_RETURN_IF_ERROR(Launch(i));
  KS_RETURN_IF_ERROR(Sync(i));
  *ms = (NowS() - t0) * 1e3;
  return absl::OkStatus();
}

// TimedRun in runs of at most ~kStopCheckS each, with a stop check between:
// the first run is one launch, later ones are sized from the time per launch
// seen so far.
absl::Status JobRun::TimedBatch(size_t i, int launches, double* ms) {
  *ms = 0;
  int done = 0, chunk = 1;
  while (done < launches) {
    const int c = std::min(chunk, launches - done);
    double run_ms = 0;
    KS_RETURN_IF_ERROR(TimedRun(i, c, &run_ms));
    *ms += run_ms;
    done += c;
    if (done < launches) KS_RETURN_IF_ERROR(Stop());
    const double per_s = *ms * 1e-3 / done;
    chunk = static_cast<int>(std::clamp(kStopCheckS / std::max(per_s, 1e-9), 1.0, 1e6));
  }
  return absl::OkStatus();
}

// `launches` in up to 10 batches (single launches, each after a flush, with
// l2_flush); one sample, in ms per launch, per batch.
absl::Status JobRun::TimeLaunches(size_t i, int launches, std::vector<double>* samples, double* total_ms) {
  *total_ms = 0;
  if (runs_[i].user != nullptr) {
    // Timed in the worker, in up to 10 batches (each launch alone after a
    // flush with l2_flush, flushed by the worker).
    KS_RETURN_IF_ERROR(Stop());
    KS_ASSIGN_OR_RETURN(user_kernels::WorkerTimes t, UserLaunches(i, 0, launches, std::min(launches, 10)));
    *total_ms = t.total_ms;
    samples->insert(samples->end(), t.sample_ms.begin(), t.sample_ms.end());
    return absl::OkStatus();
  }
  const int batches = plan_.l2_flush ? launches : std::min(launches, 10);
  int done = 0;
  for (int b = 0; b < batches; ++b) {
    const int m = (launches - done) / (batches - b);
    KS_RETURN_IF_ERROR(Flush());
    KS_RETURN_IF_ERROR(Stop());
    double ms = 0;
    KS_RETURN_IF_ERROR(TimedBatch(i, m, &ms));
    *total_ms += ms;
    samples->push_back(ms / m);
    done += m;
  }
  return absl::OkStatus();
}

absl::Status JobRun::WarmUp(size_t i, int pass) {
  const int warmup = LaunchCounts(i).warmup;
  Progress(pb::PHASE_WARMING, i, pass, absl::StrCat("warming ", runs_[i].variant->name, ": ", warmup, " launches"));
  return Warm(i, warmup);
}

void JobRun::SetTime(size_t i, const std::vector<double>& samples, double total_ms, int64_t launches) {
  pb::TimeStats ts = ComputeStats(samples);
  ts.set_mean_ms(total_ms / static_cast<double>(launches));
  ts.set_value_ms(total_ms / static_cast<double>(launches));
  ts.set_count(launches);
  *runs_[i].result.mutable_time() = ts;
}

absl::Status JobRun::TimeKernel() {
  for (size_t i : timed_) {
    const Counts c = LaunchCounts(i);
    const std::string& name = runs_[i].variant->name;
    KS_RETURN_IF_ERROR(WarmUp(i, 1));
    Progress(pb::PHASE_TIMING, i, 1, absl::StrCat("timing ", name, ": ", c.launches, " launches"));
    std::vector<double> samples;
    double total = 0;
    KS_RETURN_IF_ERROR(TimeLaunches(i, c.launches, &samples, &total));
    SetTime(i, samples, total, c.launches);
    step_ += 1;
    Land(i);
  }
  return absl::OkStatus();
}

// Pass p starts at variant p mod V, so that no variant always runs first.
absl::Status JobRun::TimePasses() {
  for (size_t i : timed_) KS_RETURN_IF_ERROR(WarmUp(i, 0));
  std::vector<std::vector<double>> pass_ms(runs_.size());
  for (int p = 0; p < plan_.passes; ++p) {
    for (size_t k = 0; k < timed_.size(); ++k) {
      const size_t i = timed_[(k + static_cast<size_t>(p)) % timed_.size()];
      const int n = LaunchCounts(i).launches;
      Progress(pb::PHASE_TIMING, i, p + 1, absl::StrCat("pass ", p + 1, " of ", plan_.passes, ": ", runs_[i].variant->name));
      std::vector<double> samples;
      double total = 0;
      KS_RETURN_IF_ERROR(TimeLaunches(i, n, &samples, &total));
      pass_ms[i].push_back(total / n);
      step_ += 1;
    }
  }
  for (size_t i : timed_) {
    pb::TimeStats ts = ComputeStats(pass_ms[i]);
    ts.set_value_ms(Median(pass_ms[i]));
    ts.set_count(static_cast<int64_t>(LaunchCounts(i).launches) * plan_.passes);
    *runs_[i].result.mutable_time() = ts;
    for (double x : pass_ms[i]) runs_[i].result.add_pass_ms(x);
    Land(i);
  }
  return absl::OkStatus();
}

absl::Status JobRun::TimeGraph() {
  for (size_t i : timed_) {
    const Counts c = LaunchCounts(i);
    const std::string& name = runs_[i].variant->name;
    KS_RETURN_IF_ERROR(WarmUp(i, 1));
    std::vector<double> samples;
    double total = 0;
    if (runs_[i].user != nullptr) {
      // Captured and replayed in the kernel's worker, on its own stream.
      Progress(pb::PHASE_TIMING, i, 1, absl::StrCat("timing ", name, ": ", c.launches, " graph replays in its worker"));
      KS_RETURN_IF_ERROR(Stop());
      absl::StatusOr<user_kernels::WorkerTimes> t =
          runs_[i].user->worker->Graph(0, c.launches, std::min(c.launches, 10), UserTimeout(i, c.launches, 0));
      if (!t.ok()) return CheckDeviceAfter(t.status());
      if (!t->not_captured.ok()) {
        ReportUntimed(i, t->not_captured);
        continue;
      }
      total = t->total_ms;
      samples = t->sample_ms;
      runs_[i].timer = Timer::kWorkerGraph;
    } else if (runs_[i].variant->on_host) {
      // Host code has no graph: timed like method kernel.
      Progress(pb::PHASE_TIMING, i, 1, absl::StrCat("timing ", name, " on the host clock: ", c.launches, " launches"));
      KS_RETURN_IF_ERROR(TimeLaunches(i, c.launches, &samples, &total));
    } else {
      Progress(pb::PHASE_TIMING, i, 1, absl::StrCat("timing ", name, ": ", c.launches, " graph replays"));
      absl::Status capture;
      KS_RETURN_IF_ERROR(GraphReplays(i, c.launches, &samples, &total, &capture));
      if (!capture.ok()) {
        ReportUntimed(i, capture);
        continue;
      }
      runs_[i].timer = Timer::kGraphEvents;
    }
    SetTime(i, samples, total, c.launches);
    step_ += 1;
    Land(i);
  }
  return absl::OkStatus();
}

// Up to 10 batches, each its own capture, with a stop check between.
absl::Status JobRun::GraphReplays(size_t i, int replays, std::vector<double>* samples, double* total_ms,
                                  absl::Status* capture) {
  const int batches = std::min(replays, 10);
  int done = 0;
  for (int b = 0; b < batches; ++b) {
    const int m = (replays - done) / (batches - b);
    KS_RETURN_IF_ERROR(Stop());
    int calls = 0;
    absl::StatusOr<double> per = env_.backend->TimeGraphReplays(
        device_,
        [this, i, &calls]() -> absl::Status {
          ++calls;
          return Launch(i);
        },
        m);
    if (per.ok()) {
      *total_ms += *per * m;
      samples->push_back(*per);
      done += m;
    } else if (absl::IsFailedPrecondition(per.status()) || (absl::IsUnimplemented(per.status()) && calls == 0)) {
      *capture = per.status();  // this variant cannot be graph-timed; the others can
      return absl::OkStatus();
    } else {
      return per.status();
    }
  }
  return absl::OkStatus();
}

// Passed the gate, reported, neither timed nor ranked.
void JobRun::ReportUntimed(size_t i, const absl::Status& capture) {
  runs_[i].result.set_error_message(capture.ToString());
  const std::string why =
      absl::StrCat(runs_[i].variant->name, " not timed: method graph could not capture it: ", capture.ToString());
  step_ += 1;
  pb::BenchEvent e;
  e.set_message(why);
  Report(i, std::move(e), why);
}

absl::Status JobRun::TimeSustained() {
  for (size_t ti = 0; ti < timed_.size(); ++ti) {
    const size_t i = timed_[ti];
    if (runs_[i].user != nullptr) {
      KS_RETURN_IF_ERROR(UserSustained(i));
    } else {
      KS_ASSIGN_OR_RETURN(const int batch, WarmIn(i));
      KS_RETURN_IF_ERROR(SustainedWindow(ti, i, batch));
    }
    step_ = static_cast<double>(ti) + 1;
    Land(i);
  }
  return absl::OkStatus();
}

// Back-to-back launches for the warm-in, in batches of about 20 ms, which
// keep the device busy between synchronisations.
absl::StatusOr<int> JobRun::WarmIn(size_t i) {
  Progress(pb::PHASE_WARMING, i, 1, absl::StrFormat("warming %s for %.3g s", runs_[i].variant->name, plan_.warmin_s));
  const double t_start = NowS();
  int batch = 1;
  while (NowS() - t_start < plan_.warmin_s) {
    KS_RETURN_IF_ERROR(Stop());
    const double t0 = NowS();
    for (int k = 0; k < batch; ++k) KS_RETURN_IF_ERROR(Launch(i));
    KS_RETURN_IF_ERROR(Sync(i));
    const double per = (NowS() - t0) / batch;
    batch = std::clamp(static_cast<int>(0.02 / std::max(per, 1e-7)), 1, 100000);
  }
  return batch;
}

// A user kernel's warm-in and window, run by its worker (one launch per
// pipe round trip would time the pipe), with the clocks sampled here.
absl::Status JobRun::UserSustained(size_t i) {
  const std::string& name = runs_[i].variant->name;
  Progress(pb::PHASE_TIMING, i, 1,
           absl::StrFormat("warming %s for %.3g s, then timing it for %.3g s at sustained clocks, in its worker", name,
                           plan_.warmin_s, plan_.window_s));
  KS_RETURN_IF_ERROR(Stop());
  runs_[i].timer = Timer::kWorkerClock;
  ClockSampler sampler(*env_.backend, device_);
  sampler.Start();
  absl::StatusOr<user_kernels::WorkerTimes> t =
      runs_[i].user->worker->Sustain(plan_.warmin_s, plan_.window_s, UserTimeout(i, 1, 2 * (plan_.warmin_s + plan_.window_s)));
  *runs_[i].result.mutable_clocks() = sampler.Stop();
  if (!t.ok()) return CheckDeviceAfter(t.status());
  if (t->launches <= 0) return absl::InternalError(absl::StrCat(name, ": its worker timed no launch"));
  SetTime(i, t->sample_ms, t->total_ms, t->launches);
  return absl::OkStatus();
}

// The window, timed on the host clock, with the clocks sampled during it.
absl::Status JobRun::SustainedWindow(size_t ti, size_t i, int batch) {
  const std::string& name = runs_[i].variant->name;
  Progress(pb::PHASE_TIMING, i, 1, absl::StrFormat("timing %s for %.3g s at sustained clocks", name, plan_.window_s));
  runs_[i].timer = Timer::kHostClock;
  ClockSampler sampler(*env_.backend, device_);
  sampler.Start();
  std::vector<double> samples;
  double total_ms = 0;
  int64_t launches = 0;
  const double t_start = NowS();
  double last_note = t_start;
  while (NowS() - t_start < plan_.window_s) {
    absl::Status st = Stop();
    if (!st.ok()) {
      sampler.Stop();
      return st;
    }
    const double t0 = NowS();
    for (int k = 0; k < batch; ++k) KS_RETURN_IF_ERROR(Launch(i));
    KS_RETURN_IF_ERROR(Sync(i));
    const double ms = (NowS() - t0) * 1e3;
    total_ms += ms;
    launches += batch;
    samples.push_back(ms / batch);
    if (NowS() - last_note > 0.5) {
      last_note = NowS();
      step_ = static_cast<double>(ti) + std::min(1.0, (last_note - t_start) / plan_.window_s);
      Progress(pb::PHASE_TIMING, i, 1, absl::StrFormat("%s: %.1f of %.3g s", name, last_note - t_start, plan_.window_s));
    }
  }
  *runs_[i].result.mutable_clocks() = sampler.Stop();
  SetTime(i, samples, total_ms, launches);
  return absl::OkStatus();
}

// ------------------------------------------------------------- results

const char* JobRun::TimerName(Timer timer) {
  switch (timer) {
    case Timer::kDeviceEvents:
      return "device events";
    case Timer::kGraphEvents:
      return "device events around CUDA-graph replays";
    case Timer::kWorkerClock:
      return "clock in the user kernel's worker process around its launches";
    case Timer::kWorkerGraph:
      return "device events around graph replays in the user kernel's worker process";
    default:
      return "host clock around synchronised launches";
  }
}

// A timed variant's rates and fractions of the ceilings, and its result.
void JobRun::Land(size_t i) {
  pb::VariantResult& r = runs_[i].result;
  r.set_timed(true);
  r.set_method(absl::StrCat(plan_.name, "; timer: ", TimerName(runs_[i].timer)));
  SetRates(r);
  pb::BenchEvent e;
  e.set_message(absl::StrFormat("%s: %.4f ms, %.3g TFLOP/s, %.3g TB/s", r.variant(), r.time().value_ms(), r.tflops(),
                                r.tbps()));
  Report(i, std::move(e), r.ceiling_note().empty() ? "" : absl::StrCat(r.variant(), ": ", r.ceiling_note()));
}

void JobRun::SetRates(pb::VariantResult& r) const {
  const double s = r.time().value_ms() * 1e-3;
  if (!(s > 0)) return;
  r.set_tflops(r.flops() / s / 1e12);
  r.set_tbps(r.bytes() / s / 1e12);
  const double gemm = host_->prepared->op->ComparesWithFp8Gemm() && ceilings_.gemm_fp8_tflops() > 0
                          ? ceilings_.gemm_fp8_tflops()
                          : ceilings_.gemm_tflops();
  if (gemm > 0) r.set_frac_gemm_ceiling(r.tflops() / gemm);
  if (ceilings_.copy_tbps() > 0) r.set_frac_copy_ceiling(r.tbps() / ceilings_.copy_tbps());
  // Over 100 % is reported as measured (clamping would hide it), with a
  // note: the ceiling's measurement, not the variant, is what is off.
  std::vector<std::string> over;
  if (r.frac_gemm_ceiling() > 1.0) {
    over.push_back(absl::StrFormat("%.3g TFLOP/s is %.0f%% of the GEMM ceiling of %.3g TFLOP/s (%s)", r.tflops(),
                                   100 * r.frac_gemm_ceiling(), gemm, ceilings_.gemm_desc()));
  }
  if (r.frac_copy_ceiling() > 1.0) {
    over.push_back(absl::StrFormat("%.3g TB/s is %.0f%% of the copy ceiling of %.3g TB/s (%s)", r.tbps(),
                                   100 * r.frac_copy_ceiling(), ceilings_.copy_tbps(), ceilings_.copy_desc()));
  }
  if (!over.empty()) {
    r.set_ceiling_note(absl::StrCat(absl::StrJoin(over, "; "),
                                    ": the ceiling measurement was below the achieved rate, so this fraction is not "
                                    "of a real ceiling"));
  }
}

// Ranks the timed variants (1 = fastest), with speedups against the first
// one the spec lists, and hands the job its results in the spec's order.
void JobRun::Rank() {
  std::vector<pb::VariantResult> results;
  for (const VariantRun& run : runs_) {
    if (run.reported) results.push_back(run.result);
  }
  std::vector<pb::VariantResult*> ranked;
  for (pb::VariantResult& r : results) {
    if (r.correct() && r.timed() && r.time().value_ms() > 0) ranked.push_back(&r);
  }
  const double first_ms = ranked.empty() ? 0 : ranked.front()->time().value_ms();
  std::sort(ranked.begin(), ranked.end(), [](const pb::VariantResult* a, const pb::VariantResult* b) {
    return a->time().value_ms() < b->time().value_ms();
  });
  for (size_t k = 0; k < ranked.size(); ++k) {
    ranked[k]->set_rank(static_cast<int>(k) + 1);
    ranked[k]->set_speedup_vs_first(first_ms / ranked[k]->time().value_ms());
  }
  std::vector<std::string> notes;
  for (const VariantRun& run : runs_) {
    if (run.result.correct() && !run.result.timed()) {
      notes.push_back(absl::StrCat(run.variant->name, " passed the gate but was not timed"));
    }
  }
  sink_->Finish(std::move(results), notes);
}

}  // namespace bench
}  // namespace kernelserve
