// One run of a benchmark job on its device (DESIGN §6), one method per
// phase. Run() calls them in this order and stops at the first error:
//
//   PrepareInputs     the inputs on the host (generated, or read from the
//                     tenant's buffers) and the validated call
//   EnsureCeilings    the device's GEMM and copy ceilings, measured by the
//                     first job on the device
//   UploadInputs      inputs, output and L2-flush buffers on the device,
//                     reserved against the memory limits first
//   ComputeReference  the fp64 oracle's reference, whole or on an exact
//                     sample of the output
//   Gate              each variant once on the job's inputs, compared with
//                     the reference
//   TimeWindow        the method (TimeKernel, TimePasses, TimeGraph,
//                     TimeSustained), all of it one task on the device's
//                     worker so that nothing else runs there meanwhile
//   Rank              ranks and speedups of the timed variants; the results
//                     in the spec's order
//
// What the backend can do (a device timer, graph replays, the cache to
// flush) comes from Backend::Capabilities(), never from its name. Results
// and events reach the job through a JobSink as they happen; the scheduler
// owns the job and implements the sink.
#ifndef KERNELSERVE_SERVER_BENCH_JOB_RUN_H_
#define KERNELSERVE_SERVER_BENCH_JOB_RUN_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "kernels/api/backend.h"
#include "kernels/api/variants.h"
#include "kernelserve/v1/bench.pb.h"
#include "server/bench/bench_inputs.h"
#include "server/bench/bench_options.h"
#include "server/bench/timing.h"
#include "server/user_kernels/builder.h"
#include "server/user_kernels/worker_client.h"

namespace kernelserve {
namespace bench {

// How a run reports to the job it runs. Each call commits to the job store
// before watchers see it (except AddNote, committed with the next one).
class JobSink {
 public:
  virtual ~JobSink() = default;
  // CANCELLED with the job's reason once it was cancelled (or the server
  // stops); OK until then.
  virtual absl::Status Cancelled() const = 0;
  virtual void Emit(pb::BenchEvent event) = 0;
  virtual void AddNote(std::string note) = 0;
  // Adds `result` to the job's results (and `note`, when not empty, to its
  // notes), committed together with `event`.
  virtual void AddResult(const pb::VariantResult& result, pb::BenchEvent event, const std::string& note) = 0;
  virtual void SetCeilings(const pb::DeviceCeilings& ceilings, const std::string& shape_desc) = 0;
  // Replaces the job's results with `results` and appends `notes`.
  virtual void Finish(std::vector<pb::VariantResult> results, const std::vector<std::string>& notes) = 0;
};

// What a run borrows from the scheduler; all of it outlives the run.
struct JobRunEnv {
  Backend* backend = nullptr;
  const BenchOptions* options = nullptr;
  const DeviceRunner* runner = nullptr;
  const BufferReader* reader = nullptr;
  const VariantRegistry* variants = nullptr;
  CeilingCache* ceilings = nullptr;
  const user_kernels::KernelBuilder* builder = nullptr;  // null: no user kernels
};

class JobRun {
 public:
  // `spec` passed Submit's validation; the time limit counts from here.
  JobRun(const JobRunEnv& env, JobSink* sink, pb::BenchJobSpec spec, std::string job_id, std::string tenant,
         int device);
  ~JobRun();
  JobRun(const JobRun&) = delete;
  JobRun& operator=(const JobRun&) = delete;

  // Every phase in order; OK: the job is DONE (variants may have failed the gate).
  absl::Status Run();

  // The method's counts with their defaults applied, and its name in results.
  struct MethodPlan {
    pb::BenchMethod method = pb::METHOD_KERNEL;
    int warmup = 0, iters = 0, passes = 1, replays = 0;
    double warmin_s = 0, window_s = 0;
    bool l2_flush = false;
    std::string name;  // "kernel (500 warm-up, 100 timed)"
  };
  static MethodPlan PlanMethod(const pb::MethodOptions& m, const BenchOptions& options);

 private:
  enum class Timer { kUnknown, kHostClock, kDeviceEvents, kGraphEvents, kWorkerClock, kWorkerGraph };
  // A user kernel of the spec: its variant, its build and its worker.
  struct UserRun {
    pb::UserKernel kernel;
    std::unique_ptr<Variant> variant;
    user_kernels::BuiltKernel built;
    std::unique_ptr<user_kernels::KernelWorker> worker;
  };
  struct VariantRun {
    const Variant* variant = nullptr;
    UserRun* user = nullptr;  // a user kernel's variant
    pb::VariantResult result;
    double gate_s = 0;  // how long its gate launch took
    Timer timer = Timer::kUnknown;
    bool reported = false;  // in the job's results
  };
  struct HostState;    // shared with host computations, which may outlive a cancelled run
  struct DeviceState;  // the run's device memory and its reservation
  struct Counts {
    int warmup = 0, launches = 0;
  };

  // Phases.
  absl::Status ResolveVariants();
  absl::Status PrepareInputs();
  absl::Status BuildUserKernels();
  absl::Status EnsureCeilings();
  absl::Status UploadInputs();
  absl::Status ComputeReference();
  absl::Status Gate();
  absl::Status TimeWindow();
  absl::Status TimeKernel();
  absl::Status TimePasses();
  absl::Status TimeGraph();
  absl::Status TimeSustained();
  void Rank();

  // Upload.
  absl::Status ReserveMemory();
  absl::Status CopyInputsToDevice();
  // Gate.
  void StartResult(size_t i);
  absl::Status GateLaunchOnHost(size_t i);
  absl::Status GateLaunchOnDevice(size_t i);
  absl::Status GateLaunchUser(size_t i);
  // A user kernel's warm-up (timed = 0) or timed launches, in its worker.
  absl::StatusOr<user_kernels::WorkerTimes> UserLaunches(size_t i, int warmup, int timed, int batches);
  double UserTimeout(size_t i, int64_t launches, double extra_s) const;
  absl::Status UserSustained(size_t i);
  // `st` from a user kernel's worker, after the device health probe when
  // the worker died abnormally.
  absl::Status CheckDeviceAfter(absl::Status st);
  absl::Status Judge(size_t i, const absl::Status& ran);
  // Timing.
  Counts LaunchCounts(size_t i) const;
  absl::Status Launch(size_t i);
  absl::Status Sync(size_t i);
  absl::Status Flush();
  absl::Status Warm(size_t i, int launches);
  absl::Status WarmUp(size_t i, int pass);  // the method's warm-up, announced
  absl::Status TimedRun(size_t i, int launches, double* ms);
  absl::Status TimedBatch(size_t i, int launches, double* ms);
  absl::Status TimeLaunches(size_t i, int launches, std::vector<double>* samples, double* total_ms);
  // Graph replays in batches; *capture: why the variant cannot be captured.
  absl::Status GraphReplays(size_t i, int replays, std::vector<double>* samples, double* total_ms,
                            absl::Status* capture);
  absl::StatusOr<int> WarmIn(size_t i);  // the batch size it settled on
  absl::Status SustainedWindow(size_t ti, size_t i, int batch);
  void SetTime(size_t i, const std::vector<double>& samples, double total_ms, int64_t launches);
  // Results.
  void Land(size_t i);
  void SetRates(pb::VariantResult& r) const;
  void ReportUntimed(size_t i, const absl::Status& capture);
  void Report(size_t i, pb::BenchEvent event, const std::string& note);
  static const char* TimerName(Timer timer);

  // Helpers.
  absl::Status OnDevice(std::function<absl::Status()> fn);
  absl::Status Stop() const;  // cancelled, or past the time limit
  void Note(pb::BenchPhase phase, std::string message, double progress);
  void Progress(pb::BenchPhase phase, size_t i, int pass, std::string message);

  const JobRunEnv env_;
  JobSink* const sink_;
  const pb::BenchJobSpec spec_;
  const std::string job_id_;
  const std::string tenant_;
  const int device_;
  const BackendCapabilities caps_;
  const MethodPlan plan_;
  const double limit_s_;
  const double deadline_s_;

  std::vector<std::unique_ptr<UserRun>> users_;
  uint64_t secret_seed_ = 0;      // the inputs' seed when a user kernel runs: fresh, never reported
  std::vector<VariantRun> runs_;  // in the spec's order
  double tolerance_ = 0;
  std::shared_ptr<HostState> host_;
  std::unique_ptr<DeviceState> dev_;
  pb::DeviceCeilings ceilings_;
  std::shared_ptr<OracleSample> reference_;  // `index` empty when the whole output is checked
  bool sampled_ = false;
  std::vector<uint8_t> poison_;  // NaN in every output element before the gate launch
  std::vector<size_t> timed_;    // variants that passed the gate
  double step_ = 0;              // timing progress, in variant-passes
};

}  // namespace bench
}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_BENCH_JOB_RUN_H_
