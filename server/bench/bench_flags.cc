#include "server/bench/bench_flags.h"

#include <cstdint>
#include <string>

#include "absl/flags/flag.h"

ABSL_FLAG(bool, enable_test_variants, false,
          "register the test-only benchmark variants test.wrong and test.nan (wrong on purpose)");
ABSL_FLAG(int, bench_max_jobs_per_submitter, 8, "queued + running benchmark jobs per submitter");
ABSL_FLAG(double, bench_default_time_limit_s, 900, "time limit of a benchmark job that names none");
ABSL_FLAG(double, bench_max_time_limit_s, 3600, "largest time limit a benchmark job may ask for");
ABSL_FLAG(int, bench_max_attempts, 2,
          "a job found running after a crash is re-queued until it has started this many times, "
          "then marked interrupted");
ABSL_FLAG(double, bench_gemm_tflops, 0,
          "GEMM ceiling in TFLOP/s measured elsewhere (e.g. torch on the H200, DESIGN §7); replaces the server's "
          "own measurement (cpu: blocked fp32 GEMM, cuda: cuBLAS bf16 when libcublas loads); 0: measure, or "
          "report \"not measured\"");
ABSL_FLAG(double, bench_gemm_fp8_tflops, 0,
          "FP8 GEMM ceiling in TFLOP/s measured elsewhere (the server never measures it); 0: not measured");
ABSL_FLAG(double, bench_max_gate_gflops, 4,
          "above this many GFLOPs the correctness gate compares an exact sample of the output with the fp64 "
          "oracle instead of all of it");
ABSL_FLAG(double, bench_max_job_mb, 0,
          "largest benchmark job (inputs, output, oracle reference) in MiB; 0: a quarter of the host's memory "
          "or half of the smallest device's");
ABSL_FLAG(double, bench_min_sustained_s, 0,
          "tests only: lower the sustained method's minimum warm-in (1 s) and window (3 s) to this");

ABSL_FLAG(bool, user_kernels, true, "accept users' own kernels in benchmark jobs (spec.user_kernels)");
ABSL_FLAG(std::string, user_kernel_cxx, "",
          "C++ compiler for cpu user kernels; empty: the first of g++, c++, clang++ on PATH");
ABSL_FLAG(std::string, user_kernel_nvcc, "",
          "CUDA compiler for cuda user kernels; empty: nvcc on PATH, else /usr/local/cuda/bin/nvcc");
ABSL_FLAG(std::string, user_kernel_worker, "",
          "the kernel worker binary; empty: user_kernels/kernel_worker beside the server binary");
ABSL_FLAG(std::string, user_kernel_worker_cuda, "",
          "the cuda kernel worker (//server/user_kernels:kernel_worker_cuda); empty: "
          "user_kernels/kernel_worker_cuda beside the server binary");
ABSL_FLAG(std::string, user_kernel_hipcc, "",
          "clang for hip user kernels (HIP C++ to a code object); empty: clang++-19, else clang++ on PATH, else "
          "/opt/rocm/llvm/bin/clang++");
ABSL_FLAG(std::string, user_kernel_worker_hip, "",
          "the hip kernel worker (//server/user_kernels:kernel_worker_hip); empty: "
          "user_kernels/kernel_worker_hip beside the server binary");
ABSL_FLAG(std::string, user_kernel_hip_arch, "gfx942",
          "the gfx architecture hip user kernels are built for, and code objects must target when the HIP "
          "backend does not report its devices'");
ABSL_FLAG(std::string, user_kernel_cache_dir, "",
          "build cache of user kernels; empty: <--data_dir>/user_kernels, or a temp dir without one");
ABSL_FLAG(std::string, user_kernel_work_dir, "/tmp", "where private build and run directories are made");
ABSL_FLAG(int, user_kernel_max_source_kb, 1024, "largest user kernel source, KiB (refused before compiling)");
ABSL_FLAG(int, user_kernel_max_object_mb, 64, "largest prebuilt user kernel object (and build output), MiB");
ABSL_FLAG(double, user_kernel_compile_timeout_s, 60, "wall-clock and CPU limit of one user kernel compile");
ABSL_FLAG(int, user_kernel_compile_memory_mb, 2048, "address-space limit of the C++ compiler's processes, MiB");
ABSL_FLAG(double, user_kernel_deadline_s, 10,
          "a user kernel's gate launch must return within this; timing gets this plus 10x its launches' time");
ABSL_FLAG(int, user_kernel_worker_memory_mb, 4096, "address-space limit of a cpu user kernel's worker, MiB");
ABSL_FLAG(bool, user_kernel_isolate_network, true,
          "run compilers and workers in a new network namespace (unshare) where the kernel allows it");
ABSL_FLAG(std::string, user_kernel_health_probe, "",
          "after a user kernel's worker dies abnormally (signal, deadline, device error), probe the device with "
          "this command (/bin/sh -c; KERNELSERVE_DEVICE and KERNELSERVE_BACKEND set; exit 0 = healthy) instead "
          "of a fresh worker process (kernel_worker --probe); a failed probe marks the device UNHEALTHY");
ABSL_FLAG(double, user_kernel_health_probe_timeout_s, 30, "a health probe not done within this has failed");
ABSL_FLAG(double, user_kernel_reprobe_interval_s, 300,
          "every this many seconds, probe again each device a failed health probe marked UNHEALTHY; it returns "
          "to service when the probe passes. 0: off (an admin's `kernelctl probe --device=N` still does it)");
ABSL_FLAG(std::string, job_store, "",
          "where benchmark jobs are kept: empty for this node's embedded store (<--data_dir>/bench.db), or "
          "postgres://[user[:password]@]host[:port]/database[?options] for a store shared by a fleet of "
          "servers, each running queued jobs of any of them on its free devices");
ABSL_FLAG(std::string, node_id, "",
          "this server's id in the fleet (--job_store=postgres://...), unique among its nodes; empty: "
          "<hostname>:<pid>. A server restarted under the same id re-queues what it ran before");
ABSL_FLAG(int64_t, fleet_heartbeat_ms, 2000, "how often a fleet node heartbeats in the job store");
ABSL_FLAG(int64_t, fleet_stale_ms, 15000,
          "a fleet node silent this long has died: its running jobs are re-queued (or interrupted after "
          "--bench_max_attempts starts) by the other nodes");

namespace kernelserve {
namespace bench {

void ApplyBenchFlags(BenchOptions* o) {
  o->test_variants = absl::GetFlag(FLAGS_enable_test_variants);
  o->max_job_bytes = absl::GetFlag(FLAGS_bench_max_job_mb) * 1048576.0;
  o->max_jobs_per_submitter = absl::GetFlag(FLAGS_bench_max_jobs_per_submitter);
  o->default_time_limit_s = absl::GetFlag(FLAGS_bench_default_time_limit_s);
  o->max_time_limit_s = absl::GetFlag(FLAGS_bench_max_time_limit_s);
  o->max_attempts = absl::GetFlag(FLAGS_bench_max_attempts);
  o->gemm_tflops = absl::GetFlag(FLAGS_bench_gemm_tflops);
  o->gemm_fp8_tflops = absl::GetFlag(FLAGS_bench_gemm_fp8_tflops);
  o->max_gate_flops = absl::GetFlag(FLAGS_bench_max_gate_gflops) * 1e9;
  user_kernels::UserKernelOptions& u = o->user_kernels;
  u.enabled = absl::GetFlag(FLAGS_user_kernels);
  u.cxx = absl::GetFlag(FLAGS_user_kernel_cxx);
  u.nvcc = absl::GetFlag(FLAGS_user_kernel_nvcc);
  u.worker = absl::GetFlag(FLAGS_user_kernel_worker);
  u.worker_cuda = absl::GetFlag(FLAGS_user_kernel_worker_cuda);
  u.hipcc = absl::GetFlag(FLAGS_user_kernel_hipcc);
  u.worker_hip = absl::GetFlag(FLAGS_user_kernel_worker_hip);
  u.hip_arch = absl::GetFlag(FLAGS_user_kernel_hip_arch);
  u.cache_dir = absl::GetFlag(FLAGS_user_kernel_cache_dir);
  u.work_dir = absl::GetFlag(FLAGS_user_kernel_work_dir);
  u.max_source_bytes = int64_t{absl::GetFlag(FLAGS_user_kernel_max_source_kb)} << 10;
  u.max_object_bytes = int64_t{absl::GetFlag(FLAGS_user_kernel_max_object_mb)} << 20;
  u.compile_timeout_s = absl::GetFlag(FLAGS_user_kernel_compile_timeout_s);
  u.compile_memory_bytes = int64_t{absl::GetFlag(FLAGS_user_kernel_compile_memory_mb)} << 20;
  u.launch_deadline_s = absl::GetFlag(FLAGS_user_kernel_deadline_s);
  u.worker_memory_bytes = int64_t{absl::GetFlag(FLAGS_user_kernel_worker_memory_mb)} << 20;
  u.isolate_network = absl::GetFlag(FLAGS_user_kernel_isolate_network);
  u.health_probe = absl::GetFlag(FLAGS_user_kernel_health_probe);
  u.health_probe_timeout_s = absl::GetFlag(FLAGS_user_kernel_health_probe_timeout_s);
  u.reprobe_interval_s = absl::GetFlag(FLAGS_user_kernel_reprobe_interval_s);
  o->fleet.job_store = absl::GetFlag(FLAGS_job_store);
  o->fleet.node_id = absl::GetFlag(FLAGS_node_id);
  o->fleet.heartbeat_ms = absl::GetFlag(FLAGS_fleet_heartbeat_ms);
  o->fleet.stale_ms = absl::GetFlag(FLAGS_fleet_stale_ms);
  const double min_s = absl::GetFlag(FLAGS_bench_min_sustained_s);
  if (min_s > 0) {
    o->min_warmin_s = min_s;
    o->min_window_s = min_s;
  }
}

}  // namespace bench
}  // namespace kernelserve
