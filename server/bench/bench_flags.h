// Command-line flags of the benchmark job service (kernelserve binary).
#ifndef KERNELSERVE_SERVER_BENCH_BENCH_FLAGS_H_
#define KERNELSERVE_SERVER_BENCH_BENCH_FLAGS_H_

#include "server/bench/scheduler.h"

namespace kernelserve {
namespace bench {

// Copies the --bench_* and --enable_test_variants flags into `options`
// (data_dir and server_version are the server's to set).
void ApplyBenchFlags(BenchOptions* options);

}  // namespace bench
}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_BENCH_BENCH_FLAGS_H_
