// Test-only: a CA, a server certificate for localhost / 127.0.0.1, client
// certificates from the same CA and one from an unrelated CA (which also
// signs a second server certificate), all made with the openssl CLI (EC
// P-256 keys, valid two days).
#ifndef KERNELSERVE_SERVER_SECURITY_TEST_CERTS_H_
#define KERNELSERVE_SERVER_SECURITY_TEST_CERTS_H_

#include <string>

#include "absl/status/statusor.h"

namespace kernelserve {
namespace security {

struct TestCerts {
  std::string dir;
  std::string ca, server_cert, server_key;  // file paths
  std::string client_cert, client_key;      // signed by `ca`: subject CN=alice
  std::string rogue_ca, rogue_cert, rogue_key;  // another CA and a client cert it signed
  // Signed by `ca`: subject "CN=bob,O=Lab" with SANs DNS:bob.lab.example and
  // email:bob@lab.example; subject CN=carol and no SAN.
  std::string bob_cert, bob_key, carol_cert, carol_key;
  // A server certificate for localhost / 127.0.0.1 from `rogue_ca` (a rotation).
  std::string rogue_server_cert, rogue_server_key;
};

// FAILED_PRECONDITION when openssl is missing or fails (its output in the message).
absl::StatusOr<TestCerts> MakeTestCerts(const std::string& dir);

}  // namespace security
}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_SECURITY_TEST_CERTS_H_
