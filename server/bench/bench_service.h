// kernelserve.v1.BenchService over a BenchScheduler. The server registers it
// and passes an admission hook (authentication, tenant, rate and stream
// limits) so this package need not know the server's internals.
#ifndef KERNELSERVE_SERVER_BENCH_BENCH_SERVICE_H_
#define KERNELSERVE_SERVER_BENCH_BENCH_SERVICE_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "kernelserve/v1/bench.grpc.pb.h"
#include "server/bench/scheduler.h"

namespace kernelserve {
namespace bench {

// Who a call comes from. `tenant` ("" without authentication) owns what the
// caller submits: the job, the buffers it reads, the memory it holds.
// `admin` widens what the caller sees: every tenant's jobs for Get, List,
// Watch and Cancel.
struct BenchCaller {
  std::string tenant;
  bool admin = false;
  // The scheduler's view filter: "" (all jobs) for admins.
  std::string scope() const { return admin ? std::string() : tenant; }
};

// Admits a call: fills *caller and may park whatever must live as long as
// the call in *hold (a stream slot).
using AdmitFn = std::function<absl::Status(grpc::ServerContext* ctx, bool stream,
                                           std::shared_ptr<void>* hold, BenchCaller* caller)>;

class BenchServiceImpl final : public pb::BenchService::Service {
 public:
  // `admit` may be empty: every call is admitted with no tenant.
  // `max_response_bytes` > 0 bounds a List response (the rest is left out,
  // `truncated` set).
  BenchServiceImpl(BenchScheduler* scheduler, AdmitFn admit, int64_t max_response_bytes = 0)
      : scheduler_(scheduler), admit_(std::move(admit)), max_response_bytes_(max_response_bytes) {}

  grpc::Status Submit(grpc::ServerContext* ctx, const pb::SubmitBenchRequest* req,
                      pb::BenchJob* resp) override;
  grpc::Status Watch(grpc::ServerContext* ctx, const pb::WatchBenchRequest* req,
                     grpc::ServerWriter<pb::BenchEvent>* writer) override;
  grpc::Status Get(grpc::ServerContext* ctx, const pb::GetBenchRequest* req,
                   pb::BenchJob* resp) override;
  grpc::Status List(grpc::ServerContext* ctx, const pb::ListBenchRequest* req,
                    pb::ListBenchResponse* resp) override;
  grpc::Status Cancel(grpc::ServerContext* ctx, const pb::CancelBenchRequest* req,
                      pb::BenchJob* resp) override;
  grpc::Status ListVariants(grpc::ServerContext* ctx, const pb::ListVariantsRequest* req,
                            pb::ListVariantsResponse* resp) override;
  grpc::Status Leaderboard(grpc::ServerContext* ctx, const pb::LeaderboardRequest* req,
                           pb::LeaderboardResponse* resp) override;

 private:
  absl::Status Admit(grpc::ServerContext* ctx, bool stream, std::shared_ptr<void>* hold,
                     BenchCaller* caller);
  // One call: its log line, admission, the request's enum fields, then
  // body(caller) (server/call_log.h: CallLog::Run).
  template <typename Body>
  grpc::Status Serve(absl::string_view method, grpc::ServerContext* ctx, bool stream,
                     const google::protobuf::Message& request, Body&& body);

  BenchScheduler* scheduler_;
  AdmitFn admit_;
  int64_t max_response_bytes_;
};

}  // namespace bench
}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_BENCH_BENCH_SERVICE_H_
