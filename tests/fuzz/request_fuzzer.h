// Fuzz target for request decoding and validation (issue 6): arbitrary bytes
// become a gRPC call on a real kernelserve (CPU backend, auth on, small
// memory limit) over loopback, so the server's whole path runs on them:
// protobuf decoding, the auth header, tensor checks (dtype, shape, byte
// counts), every op's Validate(), buffer and pool lookups, and the kernels
// themselves on whatever passes.
//
// Input format: byte 0 picks the method (Methods(), modulo: 23 methods of
// the Kernel, Buffer, Pool, Device and Bench services); byte 1's low 3 bits
// == 0 means the next byte n (mod 48) and n bytes after it form the
// "authorization" header, == 7 sends an admin tenant's token (Drain, every
// tenant's jobs), otherwise a plain tenant's token is sent; the rest is the
// request. Client-streaming and bidirectional methods take it as messages, each prefixed by a
// 2-byte little-endian length. Request fields buffer_id "B", pool_id "P" and
// job_id "J" (and map values "B": BenchInputs.buffers) are replaced by a real
// buffer, pool and finished benchmark job, so lookups succeed.
//
// Benchmark jobs: after every Submit the harness lets the job run for
// KS_FUZZ_JOB_MS (200 ms), then cancels every job still queued or running
// and waits until they stopped, so no job outlives its input. A drained
// device is returned to service after the Drain input.
//
// A finding is a status the server must never answer to a bad request
// (INTERNAL, UNKNOWN, DATA_LOSS, UNAVAILABLE: a crashed or poisoned worker),
// a benchmark job that passed Submit and then failed with one of those, a
// device marked unhealthy, or a crash: the target abort()s with the method
// and status.
#ifndef KERNELSERVE_TESTS_FUZZ_REQUEST_FUZZER_H_
#define KERNELSERVE_TESTS_FUZZ_REQUEST_FUZZER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv);
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace kernelserve {
namespace fuzz {

// Valid requests of every method, in the input format above (the corpus).
std::vector<std::string> SeedInputs();
// A protobuf-aware mutation of an input (1-3 fields of its request set to
// edge values: shapes, sizes, enums, ids, truncated data).
std::string MutateStructured(const std::string& input, uint64_t seed);
// Status codes seen so far, by name (for the driver's summary).
std::string CodeSummary();

}  // namespace fuzz
}  // namespace kernelserve

#endif  // KERNELSERVE_TESTS_FUZZ_REQUEST_FUZZER_H_
