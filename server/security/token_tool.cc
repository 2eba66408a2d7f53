// Makes bearer tokens and token-file lines (see tokens.h for the format).
//
//   token_tool --tenant=alice [--admin]   new random token on stdout, its line on stderr
//   token_tool --tenant=alice --hash_stdin [--admin]
//                                         the line for a token read from stdin
// The token itself is printed once and never stored; keep it in a secret.
#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "server/security/tokens.h"

ABSL_FLAG(std::string, tenant, "", "tenant the token belongs to");
ABSL_FLAG(bool, admin, false, "mark the token admin");
ABSL_FLAG(bool, hash_stdin, false, "hash a token read from stdin instead of making one");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("token_tool --tenant=NAME [--admin] [--hash_stdin]");
  absl::ParseCommandLine(argc, argv);
  const std::string tenant = absl::GetFlag(FLAGS_tenant);
  if (!kernelserve::security::IsValidTenantName(tenant)) {
    std::cerr << "--tenant must be 1..64 of [A-Za-z0-9_.-]\n";
    return 2;
  }
  std::string token;
  if (absl::GetFlag(FLAGS_hash_stdin)) {
    std::getline(std::cin, token);
    token = std::string(absl::StripAsciiWhitespace(token));
    if (token.empty()) {
      std::cerr << "no token on stdin\n";
      return 2;
    }
  } else {
    auto t = kernelserve::security::GenerateToken();
    if (!t.ok()) {
      std::cerr << t.status() << "\n";
      return 1;
    }
    token = *t;
    std::cout << token << "\n";
  }
  (absl::GetFlag(FLAGS_hash_stdin) ? std::cout : std::cerr)
      << kernelserve::security::TokenFileLine(tenant, token, absl::GetFlag(FLAGS_admin)) << "\n";
  return 0;
}
