// Per-call authentication: "authorization: Bearer <token>" metadata and,
// with mTLS, the client certificate → Tenant. A certificate bound to a tenant
// (tokens.h) authenticates it without a token; a token must belong to the
// same tenant as a bound certificate, and a bound tenant's token needs its
// certificate.
//
// Services call Authenticate() first in every handler of a protected service
// (health and reflection stay open for probes). Nothing secret is logged:
// failures name the reason, never the token or its hash.
#ifndef KERNELSERVE_SERVER_SECURITY_AUTH_H_
#define KERNELSERVE_SERVER_SECURITY_AUTH_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/optional.h"
#include "server/security/tokens.h"

namespace grpc {
class ServerContextBase;
}  // namespace grpc

namespace kernelserve {
namespace security {

// The verified client certificate's subject and alternative names (empty
// without mTLS).
CertIdentity CertIdentityOf(const grpc::ServerContextBase& context);

class Authenticator {
 public:
  // `tokens` == nullptr turns authentication off: every caller is the
  // anonymous admin tenant "" (loopback, single user).
  explicit Authenticator(std::shared_ptr<TokenStore> tokens) : tokens_(std::move(tokens)) {}

  bool enabled() const { return tokens_ != nullptr; }
  absl::Status Reload() { return tokens_ != nullptr ? tokens_->Reload() : absl::OkStatus(); }

  // UNAUTHENTICATED when the metadata is missing, malformed, unknown or
  // revoked, or when it and the client certificate disagree on the tenant.
  absl::StatusOr<Tenant> Authenticate(const grpc::ServerContextBase& context) const;
  // The same from the raw header value (absent: no header) and the call's
  // client certificate (none: empty).
  absl::StatusOr<Tenant> AuthenticateHeader(absl::optional<absl::string_view> authorization,
                                            const CertIdentity& cert = {}) const;

  // PERMISSION_DENIED unless `tenant` is an admin; `what` names the call.
  static absl::Status RequireAdmin(const Tenant& tenant, absl::string_view what);

 private:
  // The tenant of the bearer token alone.
  absl::StatusOr<Tenant> TokenTenant(absl::optional<absl::string_view> authorization) const;

  std::shared_ptr<TokenStore> tokens_;
};

}  // namespace security
}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_SECURITY_AUTH_H_
