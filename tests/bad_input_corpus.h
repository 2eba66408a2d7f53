// The project's bad-input corpus: requests a careless or hostile client may
// send to every RPC of every service, each with the status it must get (code
// and a part of the message naming the field). //tests:bad_input_test sends
// each over raw gRPC to a real server and checks that nothing else changed;
// the fuzz target (tests/fuzz) starts from these as seeds.
//
// Cases name live objects by the ids in CorpusIds: the test passes the real
// ids of what it created, the fuzzer its placeholders ("B", "P", ...).
#ifndef KERNELSERVE_TESTS_BAD_INPUT_CORPUS_H_
#define KERNELSERVE_TESTS_BAD_INPUT_CORPUS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "grpcpp/support/status.h"
#include "kernelserve/v1/bench.pb.h"
#include "kernelserve/v1/tensor.pb.h"

namespace kernelserve {
namespace corpus {

// What the corpus expects to exist, owned by the plain tenant (kTenantToken).
struct CorpusIds {
  std::string buffer;    // bf16 [1,1,4,128]
  std::string mla_pool;  // MLA_FUSED fp8_e4m3fn, 8 slots
  std::string kv_pool;   // PER_HEAD_KV bf16, 64 heads x 256 dims (64 KiB rows), 4 slots
  std::string job;       // a finished benchmark job
};

// The server the corpus expects (what the expected statuses depend on).
inline constexpr int kMaxMessageMb = 8;
inline constexpr int kMemoryLimitMb = 64;
inline constexpr char kTenantToken[] = "corpus-tenant";  // tenant "corpus"
inline constexpr char kAdminToken[] = "corpus-admin";    // tenant "corpus-admin", admin

enum class Kind { kUnary, kClientStream, kServerStream };
enum class Auth { kTenant, kAdmin, kNone, kMalformed };

struct BadInput {
  std::string name;
  std::string method;  // "/kernelserve.v1.PoolService/Read"
  Kind kind = Kind::kUnary;
  Auth auth = Auth::kTenant;
  std::vector<std::string> messages;  // serialized requests (one unless a client stream)
  grpc::StatusCode code = grpc::StatusCode::INVALID_ARGUMENT;
  std::string substr;  // in the status message
  // Server streams: the client reads this many messages, then cancels (the
  // call then ends CANCELLED); 0: it reads to the end.
  int read_then_cancel = 0;
};

std::vector<BadInput> BadInputs(const CorpusIds& ids);

// Request-building helpers the corpus and the fuzz seeds share.
::kernelserve::v1::Tensor Tensor(::kernelserve::v1::DType dtype, std::vector<int64_t> shape, std::string data);
// `n` bf16 values in [-2, 2): bit patterns with a small exponent, never NaN/Inf.
std::string Bf16Bytes(int64_t n, uint32_t seed = 12345);
std::string Int32Bytes(const std::vector<int32_t>& v);
// A benchmark job of `op` every method can run in milliseconds on the CPU backend.
::kernelserve::v1::BenchJobSpec SmallJob(::kernelserve::v1::BenchOp op);

// Every method of the kernelserve.v1 services, as "/package.Service/Method".
std::vector<std::string> AllMethods();

}  // namespace corpus
}  // namespace kernelserve

#endif  // KERNELSERVE_TESTS_BAD_INPUT_CORPUS_H_
