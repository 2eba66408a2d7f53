// What every protected call passes through (DESIGN §5): authentication
// (bearer token → tenant), the tenant's request rate and, for streaming
// calls, its concurrent-stream limit. The server holds one CallGate; services
// call Admit() first and TenantOf() wherever they need the owner of an object.
#ifndef KERNELSERVE_SERVER_SECURITY_CALL_GATE_H_
#define KERNELSERVE_SERVER_SECURITY_CALL_GATE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/security/auth.h"
#include "server/security/limits.h"
#include "server/security/tls.h"
#include "server/security/tokens.h"

namespace grpc {
class ServerContextBase;
}  // namespace grpc

namespace kernelserve {
namespace security {

// The security part of the server's options (flags in server/node_flags.cc).
struct NodeSecurityOptions {
  ServerTlsFiles tls;
  std::string tokens_file;  // empty: no authentication (loopback only, or --insecure)
  std::string limits_file;  // optional per-tenant overrides of `limits`
  TenantLimits limits;      // defaults for every tenant
  bool insecure = false;    // waive the non-loopback rule (listen_policy.h)
};

// A tenant name no token can map to: what TenantOf() answers when a call's
// token stopped working after Admit() (revoked mid-call), so it owns nothing.
inline constexpr char kNoTenant[] = "\x01no-tenant";

class CallGate {
 public:
  // Open gate: no authentication, no limits.
  CallGate() : CallGate(nullptr, LimitsConfig()) {}
  CallGate(std::shared_ptr<TokenStore> tokens, LimitsConfig limits);

  // Checks the listen rule, reads the tokens and limits files. The TLS files
  // are read by ServerCredentialsFromFiles (tls.h).
  static absl::StatusOr<std::shared_ptr<CallGate>> Create(const NodeSecurityOptions& options,
                                                          const std::string& listen);

  struct Admission {
    Tenant tenant;
    TenantLimiter::StreamSlot stream;  // held for the call when it is a stream
  };
  // UNAUTHENTICATED, or RESOURCE_EXHAUSTED naming the limit.
  absl::StatusOr<Admission> Admit(const grpc::ServerContextBase& context, bool stream = false);

  // The caller's tenant name ("" with authentication off).
  std::string TenantOf(const grpc::ServerContextBase& context) const;
  absl::StatusOr<Tenant> Authenticate(const grpc::ServerContextBase& context) const {
    return auth_.Authenticate(context);
  }

  bool auth_enabled() const { return auth_.enabled(); }
  // Re-reads the tokens file now (OK without one).
  absl::Status ReloadTokens() { return auth_.Reload(); }
  TenantLimiter& limiter() { return limiter_; }

 private:
  Authenticator auth_;
  TenantLimiter limiter_;
};

}  // namespace security
}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_SECURITY_CALL_GATE_H_
