#include "absl/strings/str_cat.h"
#include "server/call_log.h"
#include "server/device_health.h"
#include "server/input_checks.h"
#include "server/security/auth.h"
#include "server/services.h"
#include "spdlog/spdlog.h"

namespace kernelserve {

void FillDevice(ServerState* state, int d, pb::Device* out) {
  Backend& backend = state->backend();
  const DeviceInfo info = backend.GetDeviceInfo(d);
  out->set_index(d);
  out->set_backend(info.backend.empty() ? backend.Name() : info.backend);
  out->set_name(info.name);
  out->set_memory_total_bytes(info.memory_total_bytes);
  out->set_memory_used_bytes(state->accountant().used(d));
  out->set_memory_limit_bytes(state->accountant().limit(d));
  const bool healthy = state->healthy(d) && info.healthy;
  out->set_state(healthy ? pb::HEALTHY : pb::UNHEALTHY);
  if (!healthy) {
    const std::string reason = state->health_reason(d);
    out->set_state_reason(reason.empty() ? info.health_reason : reason);
  } else if (const std::string drain = state->draining_reason(d); !drain.empty()) {
    out->set_state(pb::DRAINING);
    out->set_state_reason(drain);
  }
  out->set_compute_units(info.compute_units);
  out->set_clock_mhz(info.clock_mhz);
  out->set_memory_clock_mhz(info.memory_clock_mhz);
  out->set_driver(info.driver);
  out->set_queue_depth(state->worker(d).queue_depth());
  out->set_queue_capacity(state->worker(d).queue_capacity());
  out->set_health_probe(state->health_probe(d));
}

grpc::Status DeviceServiceImpl::List(grpc::ServerContext* ctx, const pb::ListDevicesRequest* req,
                                     pb::ListDevicesResponse* resp) {
  CallLog log("DeviceService.List", ctx, &state_->calls());
  auto admission = state_->Admit(ctx);  // token, rate limits
  if (!admission.ok()) return log.Done(admission.status());
  for (int d = 0; d < state_->device_count(); ++d) FillDevice(state_, d, resp->add_devices());
  resp->set_server_version(kServerVersion);
  for (const BackendBuild& b : state_->backend_builds()) {
    pb::BackendBuild* out = resp->add_backends();
    out->set_name(b.name);
    out->set_built(b.built);
    out->set_active(b.name == state_->backend().Name());
    out->set_note(b.note);
  }
  resp->set_backend_selection(state_->backend_selection());
  if (fleet_view_) fleet_view_(resp);
  return log.Done(absl::OkStatus());
}

grpc::Status DeviceServiceImpl::Drain(grpc::ServerContext* ctx, const pb::DrainDeviceRequest* req,
                                      pb::Device* resp) {
  CallLog log("DeviceService.Drain", ctx, &state_->calls());
  auto admission = state_->Admit(ctx);
  if (!admission.ok()) return log.Done(admission.status());
  absl::Status admin = security::Authenticator::RequireAdmin(admission->tenant, "DeviceService.Drain");
  if (!admin.ok()) return log.Done(admin);
  if (req->index() < 0 || req->index() >= state_->device_count()) {
    return log.Done(absl::InvalidArgumentError(absl::StrCat(
        "index: expected a device index in [0, ", state_->device_count(), "), got ", req->index())));
  }
  // The reason is kept and shown in every later List: bounded like any
  // client string the server keeps.
  if (absl::Status s = CheckLength("reason", req->reason()); !s.ok()) return log.Done(s);
  const std::string reason = req->undrain() ? ""
                             : req->reason().empty() ? std::string("drained by an admin")
                                                     : req->reason();
  state_->SetDraining(req->index(), reason);
  spdlog::info("device {} {} by tenant \"{}\"{}", req->index(), req->undrain() ? "returned to service" : "draining",
               admission->tenant.name, reason.empty() ? "" : absl::StrCat(": ", reason));
  FillDevice(state_, req->index(), resp);
  return log.Done(absl::OkStatus());
}

grpc::Status DeviceServiceImpl::Probe(grpc::ServerContext* ctx, const pb::ProbeDeviceRequest* req,
                                      pb::ProbeDeviceResponse* resp) {
  CallLog log("DeviceService.Probe", ctx, &state_->calls());
  auto admission = state_->Admit(ctx);
  if (!admission.ok()) return log.Done(admission.status());
  absl::Status admin = security::Authenticator::RequireAdmin(admission->tenant, "DeviceService.Probe");
  if (!admin.ok()) return log.Done(admin);
  if (health_ == nullptr) return log.Done(absl::UnimplementedError("DeviceService.Probe: no health monitor"));
  const std::string who = admission->tenant.name.empty()
                              ? std::string("re-probe requested through DeviceService.Probe")
                              : absl::StrCat("re-probe requested by tenant \"", admission->tenant.name, "\"");
  absl::StatusOr<DeviceHealthMonitor::Verdict> v = health_->Reprobe(req->index(), who, ctx);
  if (!v.ok()) return log.Done(v.status());
  spdlog::info("device {}: {}", req->index(), v->text);
  resp->set_passed(v->passed);
  resp->set_verdict(v->text);
  FillDevice(state_, req->index(), resp->mutable_device());
  return log.Done(absl::OkStatus());
}

}  // namespace kernelserve
