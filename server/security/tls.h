// TLS and mutual TLS from PEM files (DESIGN §5). Certificates are read once
// at start-up; rotating them means restarting the server (hot reload is not
// a goal).
#ifndef KERNELSERVE_SERVER_SECURITY_TLS_H_
#define KERNELSERVE_SERVER_SECURITY_TLS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace grpc {
class ServerCredentials;
class ChannelCredentials;
}  // namespace grpc

namespace kernelserve {
namespace security {

struct ServerTlsFiles {
  std::string cert;       // PEM certificate chain; empty with `key` empty: plaintext
  std::string key;        // PEM private key
  std::string client_ca;  // PEM CA bundle; set: mTLS, clients must present a cert it signed
};

bool TlsEnabled(const ServerTlsFiles& files);

// Insecure credentials when cert and key are both empty; INVALID_ARGUMENT when
// only one is set or client_ca is set without them; NOT_FOUND for unreadable files.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFromFiles(
    const ServerTlsFiles& files);

struct ClientTlsFiles {
  std::string root_ca;  // PEM CA that signed the server's cert; empty: the system roots
  std::string cert;     // client cert and key for mTLS (both or neither)
  std::string key;
};

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFromFiles(
    const ClientTlsFiles& files);

absl::StatusOr<std::string> ReadPemFile(const std::string& path, const char* what);

}  // namespace security
}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_SECURITY_TLS_H_
