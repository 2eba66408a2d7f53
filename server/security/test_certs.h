// Test-only: a CA, a server certificate for localhost / 127.0.0.1, a client
// certificate from the same CA and one from an unrelated CA, all made with the
// openssl CLI (EC P-256 keys, valid two days).
#ifndef KERNELSERVE_SERVER_SECURITY_TEST_CERTS_H_
#define KERNELSERVE_SERVER_SECURITY_TEST_CERTS_H_

#include <string>

#include "absl/status/statusor.h"

namespace kernelserve {
namespace security {

struct TestCerts {
  std::string dir;
  std::string ca, server_cert, server_key;  // file paths
  std::string client_cert, client_key;      // signed by `ca`
  std::string rogue_ca, rogue_cert, rogue_key;  // another CA and a client cert it signed
};

// FAILED_PRECONDITION when openssl is missing or fails (its output in the message).
absl::StatusOr<TestCerts> MakeTestCerts(const std::string& dir);

}  // namespace security
}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_SECURITY_TEST_CERTS_H_
