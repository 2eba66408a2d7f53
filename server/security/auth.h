// Per-call authentication: "authorization: Bearer <token>" metadata → Tenant.
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

class Authenticator {
 public:
  // `tokens` == nullptr turns authentication off: every caller is the
  // anonymous admin tenant "" (loopback, single user).
  explicit Authenticator(std::shared_ptr<TokenStore> tokens) : tokens_(std::move(tokens)) {}

  bool enabled() const { return tokens_ != nullptr; }

  // UNAUTHENTICATED when the metadata is missing, malformed, unknown or revoked.
  absl::StatusOr<Tenant> Authenticate(const grpc::ServerContextBase& context) const;
  // The same from the raw header value (absent: no header).
  absl::StatusOr<Tenant> AuthenticateHeader(absl::optional<absl::string_view> authorization) const;

  // PERMISSION_DENIED unless `tenant` is an admin; `what` names the call.
  static absl::Status RequireAdmin(const Tenant& tenant, absl::string_view what);

 private:
  std::shared_ptr<TokenStore> tokens_;
};

}  // namespace security
}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_SECURITY_AUTH_H_
