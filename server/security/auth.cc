#include "server/security/auth.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpc/grpc_security_constants.h"
#include "grpcpp/security/auth_context.h"
#include "grpcpp/server_context.h"

namespace kernelserve {
namespace security {

CertIdentity CertIdentityOf(const grpc::ServerContextBase& context) {
  CertIdentity cert;
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return cert;
  for (const grpc::string_ref& v : auth->FindPropertyValues(GRPC_X509_SUBJECT_PROPERTY_NAME)) {
    cert.subject.assign(v.data(), v.size());
  }
  for (const grpc::string_ref& v : auth->FindPropertyValues(GRPC_X509_SAN_PROPERTY_NAME)) {
    cert.sans.emplace_back(v.data(), v.size());
  }
  return cert;
}

absl::StatusOr<Tenant> Authenticator::Authenticate(const grpc::ServerContextBase& context) const {
  if (!enabled()) return Tenant{"", true};
  const auto& metadata = context.client_metadata();
  auto range = metadata.equal_range("authorization");
  if (range.first != range.second && std::next(range.first) != range.second) {
    return absl::UnauthenticatedError("more than one authorization header");
  }
  absl::optional<absl::string_view> header;
  if (range.first != range.second) header = absl::string_view(range.first->second.data(), range.first->second.size());
  return AuthenticateHeader(header, CertIdentityOf(context));
}

absl::StatusOr<Tenant> Authenticator::AuthenticateHeader(absl::optional<absl::string_view> authorization,
                                                         const CertIdentity& cert) const {
  if (!enabled()) return Tenant{"", true};
  auto bound = tokens_->LookupCertificate(cert);
  if (!bound.ok()) return bound.status();
  if (!authorization.has_value() && bound->has_value()) return **bound;  // the certificate alone
  auto tenant = TokenTenant(authorization);
  if (!tenant.ok()) return tenant.status();
  if (bound->has_value() && (*bound)->name != tenant->name) {
    return absl::UnauthenticatedError(
        "the bearer token and the client certificate belong to different tenants");
  }
  if (!bound->has_value() && tokens_->RequiresCertificate(tenant->name)) {
    return absl::UnauthenticatedError(
        "this bearer token's tenant is bound to a client certificate; present it with the token");
  }
  return tenant;
}

absl::StatusOr<Tenant> Authenticator::TokenTenant(absl::optional<absl::string_view> authorization) const {
  if (!authorization.has_value()) {
    return absl::UnauthenticatedError(
        "missing bearer token: send metadata \"authorization: Bearer <token>\"");
  }
  absl::string_view value = absl::StripAsciiWhitespace(*authorization);
  constexpr absl::string_view kScheme = "bearer ";
  if (value.size() <= kScheme.size() || !absl::StartsWithIgnoreCase(value, kScheme)) {
    return absl::UnauthenticatedError(
        "malformed authorization header: expected \"Bearer <token>\"");
  }
  absl::string_view token = absl::StripLeadingAsciiWhitespace(value.substr(kScheme.size()));
  if (token.empty() || token.size() > 4096) {
    return absl::UnauthenticatedError("malformed bearer token");
  }
  return tokens_->Lookup(token);
}

absl::Status Authenticator::RequireAdmin(const Tenant& tenant, absl::string_view what) {
  if (tenant.admin) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(what, " is an admin-only call"));
}

}  // namespace security
}  // namespace kernelserve
