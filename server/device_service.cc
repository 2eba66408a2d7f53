#include "server/call_log.h"
#include "server/services.h"

namespace kernelserve {

grpc::Status DeviceServiceImpl::List(grpc::ServerContext* ctx, const pb::ListDevicesRequest* req,
                                     pb::ListDevicesResponse* resp) {
  CallLog log("DeviceService.List", ctx);
  auto admission = state_->Admit(ctx);  // token, rate limits
  if (!admission.ok()) return log.Done(admission.status());
  Backend& backend = state_->backend();
  for (int d = 0; d < state_->device_count(); ++d) {
    const DeviceInfo info = backend.GetDeviceInfo(d);
    pb::Device* out = resp->add_devices();
    out->set_index(d);
    out->set_backend(info.backend.empty() ? backend.Name() : info.backend);
    out->set_name(info.name);
    out->set_memory_total_bytes(info.memory_total_bytes);
    out->set_memory_used_bytes(state_->accountant().used(d));
    out->set_memory_limit_bytes(state_->accountant().limit(d));
    const bool healthy = state_->healthy(d) && info.healthy;
    out->set_state(healthy ? pb::HEALTHY : pb::UNHEALTHY);
    if (!healthy) {
      const std::string reason = state_->health_reason(d);
      out->set_state_reason(reason.empty() ? info.health_reason : reason);
    }
    out->set_compute_units(info.compute_units);
    out->set_clock_mhz(info.clock_mhz);
    out->set_memory_clock_mhz(info.memory_clock_mhz);
    out->set_driver(info.driver);
    out->set_queue_depth(state_->worker(d).queue_depth());
    out->set_queue_capacity(state_->worker(d).queue_capacity());
  }
  resp->set_server_version(kServerVersion);
  return log.Done(absl::OkStatus());
}

}  // namespace kernelserve
