#include "server/security/auth.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/server_context.h"

namespace kernelserve {
namespace security {

absl::StatusOr<Tenant> Authenticator::Authenticate(const grpc::ServerContextBase& context) const {
  if (!enabled()) return Tenant{"", true};
  const auto& metadata = context.client_metadata();
  auto range = metadata.equal_range("authorization");
  if (range.first == range.second) return AuthenticateHeader(absl::nullopt);
  if (std::next(range.first) != range.second) {
    return absl::UnauthenticatedError("more than one authorization header");
  }
  const grpc::string_ref& value = range.first->second;
  return AuthenticateHeader(absl::string_view(value.data(), value.size()));
}

absl::StatusOr<Tenant> Authenticator::AuthenticateHeader(
    absl::optional<absl::string_view> authorization) const {
  if (!enabled()) return Tenant{"", true};
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
