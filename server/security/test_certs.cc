#include "server/security/test_certs.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace kernelserve {
namespace security {
namespace {

absl::Status Run(const std::string& dir, const std::string& cmd) {
  const std::string log = dir + "/openssl.log";
  const std::string full = absl::StrCat("cd '", dir, "' && ", cmd, " >'", log, "' 2>&1");
  if (std::system(full.c_str()) == 0) return absl::OkStatus();
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  return absl::FailedPreconditionError(absl::StrCat("`", cmd, "` failed: ", ss.str()));
}

std::string OpenSsl() { return access("/usr/bin/openssl", X_OK) == 0 ? "/usr/bin/openssl" : "openssl"; }

}  // namespace

absl::StatusOr<TestCerts> MakeTestCerts(const std::string& dir) {
  mkdir(dir.c_str(), 0700);
  const std::string o = OpenSsl();
  const std::string key = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  auto make_ca = [&](const std::string& name) {
    return Run(dir, absl::StrCat(o, " req -x509", key, " -keyout ", name, ".key -out ", name,
                                 ".pem -days 2 -subj /CN=", name,
                                 " -addext basicConstraints=critical,CA:TRUE"
                                 " -addext keyUsage=critical,keyCertSign,cRLSign"));
  };
  auto make_leaf = [&](const std::string& name, const std::string& ca, const std::string& cn,
                       const std::string& ext) -> absl::Status {
    {
      std::ofstream(dir + "/" + name + ".ext") << ext << "\n";
    }
    absl::Status s = Run(dir, absl::StrCat(o, " req", key, " -keyout ", name, ".key -out ", name,
                                           ".csr -subj ", cn));
    if (!s.ok()) return s;
    return Run(dir, absl::StrCat(o, " x509 -req -in ", name, ".csr -CA ", ca, ".pem -CAkey ", ca,
                                 ".key -CAcreateserial -out ", name, ".pem -days 2 -extfile ",
                                 name, ".ext"));
  };
  absl::Status s = make_ca("ca");
  if (s.ok()) s = make_ca("rogue_ca");
  if (s.ok()) {
    s = make_leaf("server", "ca", "/CN=localhost",
                  "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth");
  }
  if (s.ok()) s = make_leaf("client", "ca", "/CN=alice", "extendedKeyUsage=clientAuth");
  if (s.ok()) s = make_leaf("rogue", "rogue_ca", "/CN=mallory", "extendedKeyUsage=clientAuth");
  if (s.ok()) {
    s = make_leaf("bob", "ca", "/O=Lab/CN=bob",
                  "subjectAltName=DNS:bob.lab.example,email:bob@lab.example\nextendedKeyUsage=clientAuth");
  }
  if (s.ok()) s = make_leaf("carol", "ca", "/CN=carol", "extendedKeyUsage=clientAuth");
  if (s.ok()) {
    s = make_leaf("server2", "rogue_ca", "/CN=localhost",
                  "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth");
  }
  if (!s.ok()) return s;
  TestCerts c;
  c.dir = dir;
  auto p = [&](const char* f) { return absl::StrCat(dir, "/", f); };
  c.ca = p("ca.pem");
  c.server_cert = p("server.pem");
  c.server_key = p("server.key");
  c.client_cert = p("client.pem");
  c.client_key = p("client.key");
  c.rogue_ca = p("rogue_ca.pem");
  c.rogue_cert = p("rogue.pem");
  c.rogue_key = p("rogue.key");
  c.bob_cert = p("bob.pem");
  c.bob_key = p("bob.key");
  c.carol_cert = p("carol.pem");
  c.carol_key = p("carol.key");
  c.rogue_server_cert = p("server2.pem");
  c.rogue_server_key = p("server2.key");
  return c;
}

}  // namespace security
}  // namespace kernelserve
