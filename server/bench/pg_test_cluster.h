// For tests: a private PostgreSQL cluster (Debian's postgresql package) on a
// unix socket in a temp dir, stopped and removed when this goes.
// PostgreSQL refuses to run as root, so under root (CI containers) the
// cluster runs as `nobody` through runuser.
#ifndef KERNELSERVE_SERVER_BENCH_PG_TEST_CLUSTER_H_
#define KERNELSERVE_SERVER_BENCH_PG_TEST_CLUSTER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace kernelserve {
namespace bench {

class PgTestCluster {
 public:
  // NOT_FOUND (with what is missing) where PostgreSQL is not installed: the
  // caller skips, saying so.
  static absl::StatusOr<std::unique_ptr<PgTestCluster>> Start();
  ~PgTestCluster();
  PgTestCluster(const PgTestCluster&) = delete;
  PgTestCluster& operator=(const PgTestCluster&) = delete;

  // postgresql:///postgres?host=<socket dir>&user=ks
  std::string url() const;
  absl::Status Restart();  // pg_ctl restart: every connection is dropped

 private:
  PgTestCluster(std::string bin, std::string dir) : bin_(std::move(bin)), dir_(std::move(dir)) {}
  absl::Status Ctl(const std::string& args) const;

  std::string bin_;  // initdb and pg_ctl's directory
  std::string dir_;  // socket dir; the cluster is in dir_/data
};

}  // namespace bench
}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_BENCH_PG_TEST_CLUSTER_H_
