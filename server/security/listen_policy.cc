#include "server/security/listen_policy.h"

#include <arpa/inet.h>

#include <algorithm>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace kernelserve {
namespace security {

bool IsLoopbackListen(absl::string_view listen) {
  if (absl::StartsWith(listen, "unix:") || absl::StartsWith(listen, "unix-abstract:")) return true;
  absl::string_view host = listen;
  if (absl::StartsWith(host, "dns:///")) host.remove_prefix(7);
  if (absl::StartsWith(host, "ipv4:")) host.remove_prefix(5);
  if (absl::StartsWith(host, "ipv6:")) host.remove_prefix(5);
  if (absl::StartsWith(host, "[")) {
    const size_t close = host.find(']');
    if (close == absl::string_view::npos) return false;
    host = host.substr(1, close - 1);
  } else {
    // "host:port"; a bare IPv6 address has several colons and no port.
    const size_t first = host.find(':');
    if (first != absl::string_view::npos && host.find(':', first + 1) == absl::string_view::npos) {
      host = host.substr(0, first);
    }
  }
  if (absl::EqualsIgnoreCase(host, "localhost")) return true;
  const std::string h(host);
  in_addr v4;
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6;
  if (inet_pton(AF_INET6, h.c_str(), &v6) == 1) {
    static const in6_addr kLoopback = IN6ADDR_LOOPBACK_INIT;
    return std::equal(v6.s6_addr, v6.s6_addr + 16, kLoopback.s6_addr);
  }
  return false;
}

absl::Status CheckListenSecurity(absl::string_view listen, bool tls, bool auth, bool insecure) {
  if (IsLoopbackListen(listen) || (tls && auth) || insecure) return absl::OkStatus();
  std::string missing;
  if (!tls) missing = "TLS (--tls_cert, --tls_key)";
  if (!auth) {
    absl::StrAppend(&missing, missing.empty() ? "" : " and ", "token authentication (--tokens_file)");
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "refusing to listen on non-loopback address ", listen, " without ", missing,
      "; pass --insecure to waive this on a trusted network"));
}

}  // namespace security
}  // namespace kernelserve
