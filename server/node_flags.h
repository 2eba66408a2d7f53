// Flags for shared nodes (TLS, tokens, limits, metrics), defined apart from
// main.cc's so the server binary gets them with one call.
#ifndef KERNELSERVE_SERVER_NODE_FLAGS_H_
#define KERNELSERVE_SERVER_NODE_FLAGS_H_

#include "server/server.h"

namespace kernelserve {

// Copies --tls_cert, --tls_key, --tls_client_ca, --tokens_file, --limits_file,
// --insecure, --metrics_listen, --health_listen, --cpu_devices and the --tenant_* limits into `options`.
void ApplyNodeFlags(ServerOptions* options);

}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_NODE_FLAGS_H_
