#include "server/bench/pg_test_cluster.h"

#include <pwd.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kernelserve {
namespace bench {
namespace {

constexpr const char* kBinDirs[] = {"/usr/lib/postgresql/17/bin", "/usr/lib/postgresql/16/bin",
                                    "/usr/lib/postgresql/15/bin"};

// Prefix that runs a command as the cluster's owner.
std::string AsOwner() { return getuid() == 0 ? "runuser -u nobody -- " : ""; }

}  // namespace

absl::StatusOr<std::unique_ptr<PgTestCluster>> PgTestCluster::Start() {
  std::string bin;
  for (const char* d : kBinDirs) {
    if (access((std::string(d) + "/pg_ctl").c_str(), X_OK) == 0) {
      bin = d;
      break;
    }
  }
  if (bin.empty()) {
    return absl::NotFoundError(
        "PostgreSQL is not installed (no /usr/lib/postgresql/{15,16,17}/bin/pg_ctl; apt-get install postgresql)");
  }
  // Under /tmp, not TEST_TMPDIR: `nobody` must reach the directory, and a
  // unix socket path is limited to 107 bytes.
  char tmpl[] = "/tmp/ks-pg-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp for the PostgreSQL cluster failed");
  std::unique_ptr<PgTestCluster> c(new PgTestCluster(bin, tmpl));
  if (getuid() == 0) {
    const passwd* pw = getpwnam("nobody");
    if (pw == nullptr || chown(tmpl, pw->pw_uid, pw->pw_gid) != 0) {
      return absl::NotFoundError("running as root and cannot give the cluster's directory to user nobody");
    }
  }
  const std::string init = absl::StrCat(AsOwner(), bin, "/initdb -D ", c->dir_, "/data -A trust -U ks --no-sync > ",
                                        c->dir_, "/initdb.log 2>&1");
  if (std::system(init.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("initdb failed: see ", c->dir_, "/initdb.log"));
  }
  if (absl::Status st = c->Ctl("start"); !st.ok()) return st;
  return c;
}

PgTestCluster::~PgTestCluster() {
  (void)Ctl("stop -m immediate");
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::string PgTestCluster::url() const { return absl::StrCat("postgresql:///postgres?host=", dir_, "&user=ks"); }

absl::Status PgTestCluster::Restart() { return Ctl("restart -m fast"); }

absl::Status PgTestCluster::Ctl(const std::string& args) const {
  // fsync off: a test cluster need not survive the machine.
  const std::string cmd = absl::StrCat(AsOwner(), bin_, "/pg_ctl -D ", dir_, "/data -w -l ", dir_, "/server.log -o \"-k ",
                                       dir_, " -c listen_addresses= -c fsync=off\" ", args, " > /dev/null 2>&1");
  if (std::system(cmd.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("pg_ctl ", args, " failed: see ", dir_, "/server.log"));
  }
  return absl::OkStatus();
}

}  // namespace bench
}  // namespace kernelserve
