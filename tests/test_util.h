// Shared helpers of the cross-cutting tests.
#ifndef KERNELSERVE_TESTS_TEST_UTIL_H_
#define KERNELSERVE_TESTS_TEST_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/api/ops.h"
#include "kernels/api/tensor.h"

namespace kernelserve {
namespace testutil {

// A seed that differs run to run (tests log it so a failure can be replayed:
// KERNELSERVE_TEST_SEED=<seed> makes every call return it).
uint64_t FreshSeed();

// Checks a bf16 output against the unrounded fp64 oracle: no NaN/Inf where
// the oracle is finite, every element within one bf16 ulp of the oracle
// rounded in `mode` (plus `abs_slack` times the largest |ref|, for fp32
// cancellation near zero), and at least `min_exact` of the elements equal to
// it bit for bit. Records gtest failures.
void ExpectBf16MatchesOracle(const HostTensor& out, const std::vector<double>& ref, Rounding mode,
                             double abs_slack = 1e-5, double min_exact = 0.9);

// An FP8 attention output (bf16, rows of `row_len`) against the oracle with
// the same P quantization. The backend's fp32 scores may put a P code on the
// other side of a rounding boundary than the fp64 oracle's (DESIGN §4 allows
// exactly this), and one such code moves its whole row by a few percent of one
// key's weight: so rows are compared one by one. No element is NaN/Inf, at
// most 1 row in 20 has an element off by more than one bf16 ulp + 2e-3, and
// such a row is within 10 % relative RMS.
void ExpectFp8AttentionMatchesOracle(const HostTensor& out, const std::vector<double>& ref, int64_t row_len);

// The Prometheus text of a server's metrics port on 127.0.0.1 (GET
// /metrics; the HTTP response, headers included; "" if it cannot connect).
std::string ScrapeMetrics(int port);

// ||out - ref|| / ||ref|| for a bf16 output.
double RelRms(const HostTensor& out, const std::vector<double>& ref);

}  // namespace testutil
}  // namespace kernelserve

#endif  // KERNELSERVE_TESTS_TEST_UTIL_H_
