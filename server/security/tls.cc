#include "server/security/tls.h"

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "absl/synchronization/mutex.h"
#include "grpc/grpc.h"
#include "grpc/grpc_security.h"
#include "spdlog/spdlog.h"

namespace kernelserve {
namespace security {

absl::StatusOr<std::string> ReadPemFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(what, " ", path, ": cannot open"));
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  if (!absl::StrContains(text, "-----BEGIN ")) {
    return absl::InvalidArgumentError(absl::StrCat(what, " ", path, ": not a PEM file"));
  }
  return text;
}

bool TlsEnabled(const ServerTlsFiles& files) { return !files.cert.empty() || !files.key.empty(); }

FileStamp StampOf(const std::string& path) {
  FileStamp s;
  struct stat st;
  if (path.empty() || stat(path.c_str(), &st) != 0) return s;
  s.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  s.size = st.st_size;
  s.inode = static_cast<int64_t>(st.st_ino);
  return s;
}

namespace {

struct Pems {
  std::string cert, key, ca;
};

// The files' contents, checked as OpenSSL will read them at a handshake, so
// that a bad set is refused here instead of breaking new connections.
absl::StatusOr<Pems> ReadPems(const ServerTlsFiles& files) {
  Pems p;
  auto cert = ReadPemFile(files.cert, "TLS certificate");
  if (!cert.ok()) return cert.status();
  auto key = ReadPemFile(files.key, "TLS key");
  if (!key.ok()) return key.status();
  p.cert = *std::move(cert);
  p.key = *std::move(key);
  if (!files.client_ca.empty()) {
    auto ca = ReadPemFile(files.client_ca, "TLS client CA");
    if (!ca.ok()) return ca.status();
    p.ca = *std::move(ca);
  }
  BIO* cert_bio = BIO_new_mem_buf(p.cert.data(), static_cast<int>(p.cert.size()));
  X509* x509 = PEM_read_bio_X509(cert_bio, nullptr, nullptr, nullptr);
  BIO_free(cert_bio);
  BIO* key_bio = BIO_new_mem_buf(p.key.data(), static_cast<int>(p.key.size()));
  EVP_PKEY* pkey = PEM_read_bio_PrivateKey(key_bio, nullptr, nullptr, nullptr);
  BIO_free(key_bio);
  absl::Status status;
  if (x509 == nullptr) {
    status = absl::InvalidArgumentError(absl::StrCat("TLS certificate ", files.cert, ": no certificate in it"));
  } else if (pkey == nullptr) {
    status = absl::InvalidArgumentError(absl::StrCat("TLS key ", files.key, ": no private key in it"));
  } else if (X509_check_private_key(x509, pkey) != 1) {
    status = absl::InvalidArgumentError(
        absl::StrCat("TLS key ", files.key, " does not match the certificate ", files.cert));
  }
  X509_free(x509);
  EVP_PKEY_free(pkey);
  if (!status.ok()) return status;
  return p;
}

}  // namespace

struct ServerTls::State {
  ServerTlsFiles files;
  absl::Mutex mu;
  Pems pems ABSL_GUARDED_BY(mu);
  std::vector<FileStamp> stamps ABSL_GUARDED_BY(mu);  // of the files `pems` came from
  std::vector<FileStamp> failed ABSL_GUARDED_BY(mu);  // a set that did not load (logged once)
  bool handed ABSL_GUARDED_BY(mu) = false;            // gRPC has `pems`
  absl::Time next_check ABSL_GUARDED_BY(mu) = absl::InfinitePast();
  int64_t loads ABSL_GUARDED_BY(mu) = 0;

  std::vector<FileStamp> Stamps() const {
    return {StampOf(files.cert), StampOf(files.key), StampOf(files.client_ca)};
  }

  absl::Status LoadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::vector<FileStamp> now = Stamps();  // before the read: a later change is seen next time
    auto read = ReadPems(files);
    if (!read.ok()) {
      failed = std::move(now);
      return read.status();
    }
    pems = *std::move(read);
    stamps = std::move(now);
    handed = false;
    ++loads;
    return absl::OkStatus();
  }

  // gRPC's certificate-config fetcher, asked at every handshake.
  grpc_ssl_certificate_config_reload_status Fetch(grpc_ssl_server_certificate_config** config) {
    absl::MutexLock lock(&mu);
    const absl::Time now = absl::Now();
    if (handed && files.watch_interval > absl::ZeroDuration() && now >= next_check) {
      next_check = now + files.watch_interval;
      const std::vector<FileStamp> current = Stamps();
      if (!(current == stamps) && !(current == failed)) {
        absl::Status s = LoadLocked();
        if (s.ok()) {
          spdlog::info("TLS certificates reloaded after a file change ({} loads)", loads);
        } else {
          spdlog::error("TLS files changed but do not load; keeping the previous certificates: {}", s.ToString());
        }
      }
    }
    if (handed) return GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_UNCHANGED;
    grpc_ssl_pem_key_cert_pair pair{pems.key.c_str(), pems.cert.c_str()};
    // gRPC's fetcher path insists on root certificates even when no client
    // certificate is requested; they are then never used, so without a
    // client CA the server's own chain stands in.
    const std::string& roots = pems.ca.empty() ? pems.cert : pems.ca;
    *config = grpc_ssl_server_certificate_config_create(roots.c_str(), &pair, 1);
    handed = true;
    return GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_NEW;
  }
};

namespace {

grpc_ssl_certificate_config_reload_status FetchConfig(void* user_data,
                                                      grpc_ssl_server_certificate_config** config) {
  std::shared_ptr<ServerTls::State> state = static_cast<std::weak_ptr<ServerTls::State>*>(user_data)->lock();
  // Credentials outlived by a listener keep the certificates they last had.
  if (state == nullptr) return GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_UNCHANGED;
  return state->Fetch(config);
}

// gRPC's SSL server credentials with a certificate-config fetcher, which
// grpc::SslServerCredentials does not offer.
class FetchingServerCredentials final : public grpc::ServerCredentials {
 public:
  FetchingServerCredentials(std::shared_ptr<ServerTls::State> state, bool require_client_cert)
      : state_(std::move(state)) {
    // The fetcher's user data has no destructor hook and gRPC may hold the C
    // credentials past this object: a small box per credentials is kept for
    // the process's life, and it only ever points weakly at the state.
    auto* box = new std::weak_ptr<ServerTls::State>(state_);
    grpc_ssl_server_credentials_options* options = grpc_ssl_server_credentials_create_options_using_config_fetcher(
        require_client_cert ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                            : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
        FetchConfig, box);
    c_creds_ = grpc_ssl_server_credentials_create_with_options(options);
  }
  ~FetchingServerCredentials() override {
    if (c_creds_ != nullptr) grpc_server_credentials_release(c_creds_);
  }
  bool valid() const { return c_creds_ != nullptr; }
  // kernelserve authenticates in its services (auth.h), not in a processor.
  void SetAuthMetadataProcessor(const std::shared_ptr<grpc::AuthMetadataProcessor>&) override {}

 private:
  int AddPortToServer(const std::string& addr, grpc_server* server) override {
    return grpc_server_add_http2_port(server, addr.c_str(), c_creds_);
  }

  std::shared_ptr<ServerTls::State> state_;
  grpc_server_credentials* c_creds_ = nullptr;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ServerTls>> ServerTls::Load(const ServerTlsFiles& files) {
  if (files.cert.empty() || files.key.empty()) {
    return absl::InvalidArgumentError("TLS needs both --tls_cert and --tls_key");
  }
  auto state = std::make_shared<State>();
  state->files = files;
  {
    absl::MutexLock lock(&state->mu);
    absl::Status s = state->LoadLocked();
    if (!s.ok()) return s;
    state->next_check = absl::Now() + files.watch_interval;
  }
  auto creds = std::make_shared<FetchingServerCredentials>(state, !files.client_ca.empty());
  if (!creds->valid()) return absl::InternalError("gRPC could not create TLS server credentials");
  std::unique_ptr<ServerTls> tls(new ServerTls());
  tls->state_ = std::move(state);
  tls->credentials_ = std::move(creds);
  return tls;
}

ServerTls::~ServerTls() = default;

absl::Status ServerTls::Reload() {
  absl::MutexLock lock(&state_->mu);
  absl::Status s = state_->LoadLocked();
  if (s.ok()) {
    spdlog::info("TLS certificates reloaded ({} loads)", state_->loads);
  } else {
    spdlog::error("TLS reload failed; keeping the previous certificates: {}", s.ToString());
  }
  return s;
}

int64_t ServerTls::loads() const {
  absl::MutexLock lock(&state_->mu);
  return state_->loads;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFromFiles(
    const ServerTlsFiles& files) {
  if (!TlsEnabled(files)) {
    if (!files.client_ca.empty()) {
      return absl::InvalidArgumentError("--tls_client_ca needs --tls_cert and --tls_key");
    }
    return grpc::InsecureServerCredentials();
  }
  auto tls = ServerTls::Load(files);
  if (!tls.ok()) return tls.status();
  return (*tls)->credentials();
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFromFiles(
    const ClientTlsFiles& files) {
  if (files.cert.empty() != files.key.empty()) {
    return absl::InvalidArgumentError("a client certificate needs both --tls_cert and --tls_key");
  }
  grpc::SslCredentialsOptions options;
  if (!files.root_ca.empty()) {
    auto ca = ReadPemFile(files.root_ca, "TLS CA");
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *std::move(ca);
  }
  if (!files.cert.empty()) {
    auto cert = ReadPemFile(files.cert, "TLS client certificate");
    if (!cert.ok()) return cert.status();
    auto key = ReadPemFile(files.key, "TLS client key");
    if (!key.ok()) return key.status();
    options.pem_cert_chain = *std::move(cert);
    options.pem_private_key = *std::move(key);
  }
  return grpc::SslCredentials(options);
}

}  // namespace security
}  // namespace kernelserve
