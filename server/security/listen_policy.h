// The rule for shared nodes (DESIGN §5): listening beyond loopback needs TLS
// and token authentication, unless the operator waives it with --insecure.
#ifndef KERNELSERVE_SERVER_SECURITY_LISTEN_POLICY_H_
#define KERNELSERVE_SERVER_SECURITY_LISTEN_POLICY_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kernelserve {
namespace security {

// True for 127.0.0.0/8, ::1, "localhost" and unix-domain sockets. Wildcards
// (0.0.0.0, [::], ":port") and every other host are not loopback.
bool IsLoopbackListen(absl::string_view listen);

// FAILED_PRECONDITION naming what is missing and the waiver flag.
absl::Status CheckListenSecurity(absl::string_view listen, bool tls, bool auth, bool insecure);

}  // namespace security
}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_SECURITY_LISTEN_POLICY_H_
