#include "server/bench/bench_service.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "server/call_log.h"
#include "server/input_checks.h"

namespace kernelserve {
namespace bench {

absl::Status BenchServiceImpl::Admit(grpc::ServerContext* ctx, bool stream, std::shared_ptr<void>* hold,
                                     BenchCaller* caller) {
  *caller = BenchCaller();
  if (!admit_) return absl::OkStatus();
  return admit_(ctx, stream, hold, caller);
}

template <typename Body>
grpc::Status BenchServiceImpl::Serve(absl::string_view method, grpc::ServerContext* ctx, bool stream,
                                     const google::protobuf::Message& request, Body&& body) {
  CallLog log(method, ctx);
  return log.Run([&]() -> absl::Status {
    std::shared_ptr<void> hold;  // the stream slot, for the call
    BenchCaller caller;
    KS_RETURN_IF_ERROR(Admit(ctx, stream, &hold, &caller));
    KS_RETURN_IF_ERROR(CheckEnumFields(request));
    return body(caller);
  });
}

grpc::Status BenchServiceImpl::Submit(grpc::ServerContext* ctx, const pb::SubmitBenchRequest* req,
                                      pb::BenchJob* resp) {
  return Serve("BenchService.Submit", ctx, false, *req, [&](const BenchCaller& caller) -> absl::Status {
    // The job is the caller's own, admin or not: it reads the caller's buffers.
    KS_ASSIGN_OR_RETURN(*resp, scheduler_->Submit(req->spec(), caller.tenant));
    return absl::OkStatus();
  });
}

grpc::Status BenchServiceImpl::Watch(grpc::ServerContext* ctx, const pb::WatchBenchRequest* req,
                                     grpc::ServerWriter<pb::BenchEvent>* writer) {
  return Serve("BenchService.Watch", ctx, true, *req, [&](const BenchCaller& caller) -> absl::Status {
    if (req->after_seq() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("after_seq: expected >= 0 (0: every event), got ", req->after_seq()));
    }
    int64_t after = req->after_seq();
    while (true) {
      if (ctx->IsCancelled()) return absl::CancelledError("watch cancelled by the client");
      std::vector<pb::BenchEvent> events;
      bool finished = false;
      // Short waits so that a client that went away is noticed.
      KS_RETURN_IF_ERROR(scheduler_->WaitEvents(req->job_id(), after, absl::Milliseconds(250), &events,
                                                &finished, caller.scope()));
      for (const pb::BenchEvent& e : events) {
        if (!writer->Write(e)) return absl::CancelledError("the client went away");
        after = e.seq();
      }
      if (finished) return absl::OkStatus();
      if (events.empty() && scheduler_->shutting_down()) {
        return absl::UnavailableError(
            "the server is shutting down; the job stays queued; watch again after restart");
      }
    }
  });
}

grpc::Status BenchServiceImpl::Get(grpc::ServerContext* ctx, const pb::GetBenchRequest* req,
                                   pb::BenchJob* resp) {
  return Serve("BenchService.Get", ctx, false, *req, [&](const BenchCaller& caller) -> absl::Status {
    KS_ASSIGN_OR_RETURN(*resp, scheduler_->Get(req->job_id(), caller.scope()));
    return absl::OkStatus();
  });
}

grpc::Status BenchServiceImpl::List(grpc::ServerContext* ctx, const pb::ListBenchRequest* req,
                                    pb::ListBenchResponse* resp) {
  return Serve("BenchService.List", ctx, false, *req, [&](const BenchCaller& caller) -> absl::Status {
    if (req->limit() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("limit: expected >= 0 (0: the newest 100 jobs), got ", req->limit()));
    }
    for (int i = 0; i < req->states_size(); ++i) {
      if (req->states(i) == pb::BENCH_JOB_STATE_UNSPECIFIED) {
        return absl::InvalidArgumentError(absl::StrCat(
            "states[", i, "]: BENCH_JOB_STATE_UNSPECIFIED matches no job; give JOB_QUEUED .. JOB_INTERRUPTED"));
      }
    }
    KS_RETURN_IF_ERROR(CheckLength("submitter", req->submitter()));
    bool truncated = false;
    for (pb::BenchJob& j : scheduler_->List(*req, caller.scope(), max_response_bytes_, &truncated)) {
      *resp->add_jobs() = std::move(j);
    }
    resp->set_truncated(truncated);
    return absl::OkStatus();
  });
}

grpc::Status BenchServiceImpl::Cancel(grpc::ServerContext* ctx, const pb::CancelBenchRequest* req,
                                      pb::BenchJob* resp) {
  return Serve("BenchService.Cancel", ctx, false, *req, [&](const BenchCaller& caller) -> absl::Status {
    KS_ASSIGN_OR_RETURN(*resp, scheduler_->Cancel(req->job_id(), req->reason(), caller.scope()));
    return absl::OkStatus();
  });
}

grpc::Status BenchServiceImpl::ListVariants(grpc::ServerContext* ctx, const pb::ListVariantsRequest* req,
                                            pb::ListVariantsResponse* resp) {
  return Serve("BenchService.ListVariants", ctx, false, *req, [&](const BenchCaller&) {
    *resp = scheduler_->ListVariants(req->op());
    return absl::OkStatus();
  });
}

grpc::Status BenchServiceImpl::Leaderboard(grpc::ServerContext* ctx, const pb::LeaderboardRequest* req,
                                           pb::LeaderboardResponse* resp) {
  return Serve("BenchService.Leaderboard", ctx, false, *req, [&](const BenchCaller& caller) -> absl::Status {
    KS_ASSIGN_OR_RETURN(*resp, scheduler_->Leaderboard(*req, caller.scope()));
    return absl::OkStatus();
  });
}

}  // namespace bench
}  // namespace kernelserve
