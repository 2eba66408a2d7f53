#include "server/security/call_gate.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/security/listen_policy.h"
#include "spdlog/spdlog.h"

namespace kernelserve {
namespace security {

CallGate::CallGate(std::shared_ptr<TokenStore> tokens, LimitsConfig limits)
    : auth_(std::move(tokens)), limiter_(std::move(limits)) {}

absl::StatusOr<std::shared_ptr<CallGate>> CallGate::Create(const NodeSecurityOptions& options,
                                                           const std::string& listen) {
  absl::Status rule = CheckListenSecurity(listen, TlsEnabled(options.tls),
                                          !options.tokens_file.empty(), options.insecure);
  if (!rule.ok()) return rule;
  std::shared_ptr<TokenStore> tokens;
  if (!options.tokens_file.empty()) {
    auto store = TokenStore::Open(options.tokens_file);
    if (!store.ok()) return store.status();
    if ((*store)->size() == 0) {
      spdlog::warn("--tokens_file={} lists no tokens: every call will be refused",
                   options.tokens_file);
    }
    if ((*store)->HasBindings() && options.tls.client_ca.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--tokens_file=", options.tokens_file,
          " binds tenants to client certificates, which needs mTLS (--tls_client_ca); without it those "
          "tenants could not authenticate"));
    }
    tokens = std::move(*store);
  }
  LimitsConfig limits;
  limits.defaults = options.limits;
  if (!options.limits_file.empty()) {
    auto parsed = LoadLimitsFile(options.limits_file, options.limits);
    if (!parsed.ok()) return parsed.status();
    limits = *std::move(parsed);
  }
  if (!IsLoopbackListen(listen) && options.insecure &&
      (!TlsEnabled(options.tls) || options.tokens_file.empty())) {
    spdlog::warn("--insecure: serving {} on {} without {}", "kernelserve", listen,
                 !TlsEnabled(options.tls) ? "TLS" : "token authentication");
  }
  return std::make_shared<CallGate>(std::move(tokens), std::move(limits));
}

absl::StatusOr<CallGate::Admission> CallGate::Admit(const grpc::ServerContextBase& context,
                                                    bool stream) {
  Admission admission;
  auto tenant = auth_.Authenticate(context);
  if (!tenant.ok()) return tenant.status();
  admission.tenant = *std::move(tenant);
  absl::Status rate = limiter_.AdmitRequest(admission.tenant);
  if (!rate.ok()) return rate;
  if (stream) {
    auto slot = limiter_.AcquireStream(admission.tenant);
    if (!slot.ok()) return slot.status();
    admission.stream = *std::move(slot);
  }
  return admission;
}

std::string CallGate::TenantOf(const grpc::ServerContextBase& context) const {
  auto tenant = auth_.Authenticate(context);
  return tenant.ok() ? tenant->name : std::string(kNoTenant);
}

}  // namespace security
}  // namespace kernelserve
