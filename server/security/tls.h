// TLS and mutual TLS from PEM files (DESIGN §5). The server's certificate,
// key and client CA are re-read without a restart: on ServerTls::Reload()
// (the binary calls it on SIGHUP) and when one of the files changes (checked
// at most once per watch_interval, at a new connection's handshake). A set that does
// not load (unreadable, not PEM, a key that does not match the certificate)
// is logged and the previous one kept. Connections already open keep the
// certificates they were made with.
#ifndef KERNELSERVE_SERVER_SECURITY_TLS_H_
#define KERNELSERVE_SERVER_SECURITY_TLS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

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
  // How often a handshake may look for changed files; zero: only Reload().
  absl::Duration watch_interval = absl::Seconds(1);
};

bool TlsEnabled(const ServerTlsFiles& files);

// What tells a changed file from an unchanged one: its mtime, size and inode
// (-1 each when it cannot be stat'ed; errno says why).
struct FileStamp {
  int64_t mtime_ns = -1;
  int64_t size = -1;
  int64_t inode = -1;
  bool operator==(const FileStamp& o) const {
    return mtime_ns == o.mtime_ns && size == o.size && inode == o.inode;
  }
};
FileStamp StampOf(const std::string& path);

// Server TLS credentials over files that may change (above).
class ServerTls {
 public:
  // INVALID_ARGUMENT when only one of cert and key is set, or for a set that
  // does not load; NOT_FOUND for unreadable files.
  static absl::StatusOr<std::unique_ptr<ServerTls>> Load(const ServerTlsFiles& files);
  ~ServerTls();

  std::shared_ptr<grpc::ServerCredentials> credentials() const { return credentials_; }
  // Reads the files now; the next handshake uses them. Not OK keeps the
  // current set (and says why).
  absl::Status Reload();
  // Sets loaded so far, the first included.
  int64_t loads() const;

  struct State;

 private:
  ServerTls() = default;
  std::shared_ptr<State> state_;
  std::shared_ptr<grpc::ServerCredentials> credentials_;
};

// Insecure credentials when cert and key are both empty; INVALID_ARGUMENT when
// only one is set or client_ca is set without them; NOT_FOUND for unreadable
// files. TLS credentials reload their files as ServerTls does for as long as
// they live.
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
