#include "server/bench/bench_service.h"

#include <vector>

#include "absl/time/time.h"
#include "server/status_mapping.h"

namespace kernelserve {
namespace bench {

absl::Status BenchServiceImpl::Admit(grpc::ServerContext* ctx, bool stream, std::shared_ptr<void>* hold,
                                     BenchCaller* caller) {
  *caller = BenchCaller();
  if (!admit_) return absl::OkStatus();
  return admit_(ctx, stream, hold, caller);
}

grpc::Status BenchServiceImpl::Submit(grpc::ServerContext* ctx, const pb::SubmitBenchRequest* req,
                                      pb::BenchJob* resp) {
  std::shared_ptr<void> hold;
  BenchCaller caller;
  absl::Status st = Admit(ctx, false, &hold, &caller);
  if (!st.ok()) return ToGrpcStatus(st);
  // The job is the caller's own, admin or not: it reads the caller's buffers.
  absl::StatusOr<pb::BenchJob> job = scheduler_->Submit(req->spec(), caller.tenant);
  if (!job.ok()) return ToGrpcStatus(job.status());
  *resp = std::move(*job);
  return grpc::Status::OK;
}

grpc::Status BenchServiceImpl::Watch(grpc::ServerContext* ctx, const pb::WatchBenchRequest* req,
                                     grpc::ServerWriter<pb::BenchEvent>* writer) {
  std::shared_ptr<void> hold;
  BenchCaller caller;
  absl::Status st = Admit(ctx, true, &hold, &caller);
  if (!st.ok()) return ToGrpcStatus(st);
  int64_t after = req->after_seq();
  while (true) {
    if (ctx->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled by the client");
    std::vector<pb::BenchEvent> events;
    bool finished = false;
    // Short waits so that a client that went away is noticed.
    st = scheduler_->WaitEvents(req->job_id(), after, absl::Milliseconds(250), &events, &finished, caller.scope());
    if (!st.ok()) return ToGrpcStatus(st);
    for (const pb::BenchEvent& e : events) {
      if (!writer->Write(e)) return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
      after = e.seq();
    }
    if (finished) return grpc::Status::OK;
    if (events.empty() && scheduler_->shutting_down()) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          "the server is shutting down; the job stays queued; watch again after restart");
    }
  }
}

grpc::Status BenchServiceImpl::Get(grpc::ServerContext* ctx, const pb::GetBenchRequest* req,
                                   pb::BenchJob* resp) {
  std::shared_ptr<void> hold;
  BenchCaller caller;
  absl::Status st = Admit(ctx, false, &hold, &caller);
  if (!st.ok()) return ToGrpcStatus(st);
  absl::StatusOr<pb::BenchJob> job = scheduler_->Get(req->job_id(), caller.scope());
  if (!job.ok()) return ToGrpcStatus(job.status());
  *resp = std::move(*job);
  return grpc::Status::OK;
}

grpc::Status BenchServiceImpl::List(grpc::ServerContext* ctx, const pb::ListBenchRequest* req,
                                    pb::ListBenchResponse* resp) {
  std::shared_ptr<void> hold;
  BenchCaller caller;
  absl::Status st = Admit(ctx, false, &hold, &caller);
  if (!st.ok()) return ToGrpcStatus(st);
  for (pb::BenchJob& j : scheduler_->List(*req, caller.scope())) *resp->add_jobs() = std::move(j);
  return grpc::Status::OK;
}

grpc::Status BenchServiceImpl::Cancel(grpc::ServerContext* ctx, const pb::CancelBenchRequest* req,
                                      pb::BenchJob* resp) {
  std::shared_ptr<void> hold;
  BenchCaller caller;
  absl::Status st = Admit(ctx, false, &hold, &caller);
  if (!st.ok()) return ToGrpcStatus(st);
  absl::StatusOr<pb::BenchJob> job = scheduler_->Cancel(req->job_id(), req->reason(), caller.scope());
  if (!job.ok()) return ToGrpcStatus(job.status());
  *resp = std::move(*job);
  return grpc::Status::OK;
}

grpc::Status BenchServiceImpl::ListVariants(grpc::ServerContext* ctx, const pb::ListVariantsRequest* req,
                                            pb::ListVariantsResponse* resp) {
  std::shared_ptr<void> hold;
  BenchCaller caller;
  absl::Status st = Admit(ctx, false, &hold, &caller);
  if (!st.ok()) return ToGrpcStatus(st);
  *resp = scheduler_->ListVariants(req->op());
  return grpc::Status::OK;
}

}  // namespace bench
}  // namespace kernelserve
