// The gRPC services of kernelserve.v1 over a ServerState.
#ifndef KERNELSERVE_SERVER_SERVICES_H_
#define KERNELSERVE_SERVER_SERVICES_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/shm_ring.h"
#include "kernelserve/v1/device.grpc.pb.h"
#include "kernelserve/v1/kernel.grpc.pb.h"
#include "kernelserve/v1/pool.grpc.pb.h"
#include "kernelserve/v1/tensor.grpc.pb.h"
#include "server/decoding_reader.h"
#include "server/server_state.h"

namespace kernelserve {

namespace pb = ::kernelserve::v1;

class DeviceHealthMonitor;

// Lists `objects` into `resp` through fill(object, entry), as many as fit in
// one response of `max_bytes`; the rest are left out and `truncated` is set.
// The response is bounded before it is built, however many objects exist.
template <typename Resp, typename Obj, typename Entry>
void ListInto(const std::vector<std::shared_ptr<Obj>>& objects, int64_t max_bytes, Resp* resp,
              Entry* (Resp::*add)(), void (*fill)(const Obj&, Entry*)) {
  constexpr int64_t kEntryFraming = 16;  // field tag and length prefix, generously
  int64_t size = 0;
  for (const auto& object : objects) {
    Entry entry;
    fill(*object, &entry);
    const int64_t n = static_cast<int64_t>(entry.ByteSizeLong()) + kEntryFraming;
    if (size + n > max_bytes) {
      resp->set_truncated(true);
      return;
    }
    size += n;
    (resp->*add)()->Swap(&entry);
  }
}

class BufferServiceImpl final : public pb::BufferService::Service {
 public:
  explicit BufferServiceImpl(ServerState* state);
  // Upload decodes its messages itself (decoding_reader.h).
  grpc::Status Upload(grpc::ServerContext* ctx, DecodingReader<pb::UploadChunk>* reader, pb::BufferInfo* info);
  // Download writes its messages' bytes itself (common/grpc_wire.h).
  grpc::Status Download(grpc::ServerContext* ctx,
                        grpc::ServerSplitStreamer<grpc::ByteBuffer, grpc::ByteBuffer>* stream);
  grpc::Status Free(grpc::ServerContext* ctx, const pb::FreeBufferRequest* req,
                    pb::FreeBufferResponse* resp) override;
  grpc::Status List(grpc::ServerContext* ctx, const pb::ListBuffersRequest* req,
                    pb::ListBuffersResponse* resp) override;

 private:
  ServerState* state_;
};

class PoolServiceImpl final : public pb::PoolService::Service {
 public:
  explicit PoolServiceImpl(ServerState* state);
  grpc::Status Create(grpc::ServerContext* ctx, const pb::CreatePoolRequest* req,
                      pb::PoolInfo* info) override;
  // Write decodes its messages itself (decoding_reader.h).
  grpc::Status Write(grpc::ServerContext* ctx, DecodingReader<pb::WritePoolChunk>* reader,
                     pb::WritePoolResponse* resp);
  grpc::Status Read(grpc::ServerContext* ctx, const pb::ReadPoolRequest* req,
                    grpc::ServerWriter<pb::ReadPoolChunk>* writer) override;
  grpc::Status Stats(grpc::ServerContext* ctx, const pb::PoolStatsRequest* req,
                     pb::PoolInfo* info) override;
  grpc::Status Delete(grpc::ServerContext* ctx, const pb::DeletePoolRequest* req,
                      pb::DeletePoolResponse* resp) override;
  grpc::Status List(grpc::ServerContext* ctx, const pb::ListPoolsRequest* req,
                    pb::ListPoolsResponse* resp) override;

 private:
  ServerState* state_;
};

class KernelServiceImpl final : public pb::KernelService::Service {
 public:
  explicit KernelServiceImpl(ServerState* state);
  grpc::Status Attention(grpc::ServerContext* ctx, const pb::AttentionRequest* req,
                         pb::AttentionResponse* resp) override;
  grpc::Status Fp8Attention(grpc::ServerContext* ctx, const pb::Fp8AttentionRequest* req,
                            pb::Fp8AttentionResponse* resp) override;
  grpc::Status MlaDecode(grpc::ServerContext* ctx, const pb::MlaDecodeRequest* req,
                         pb::MlaDecodeResponse* resp) override;
  grpc::Status Moe(grpc::ServerContext* ctx, const pb::MoeRequest* req,
                   pb::MoeResponse* resp) override;
  grpc::Status DecodeAttention(grpc::ServerContext* ctx, const pb::DecodeAttentionRequest* req,
                               pb::DecodeAttentionResponse* resp) override;
  // Shutdown, once no call is running: ends every open session (each waits
  // in Read for its next request, holding a server thread), so the gRPC
  // server's shutdown does not wait out its grace for them.
  void CancelSessions();

 private:
  // KernelService.Session over raw messages: each request is decoded here,
  // so one that does not decode is answered INVALID_ARGUMENT (gRPC's own
  // reader would end the stream as if the client had closed it).
  grpc::Status RunSession(grpc::ServerContext* ctx,
                          grpc::ServerReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>* stream);
  // The caller's own ring named in an attach_ring request, or why not.
  absl::StatusOr<ShmRing> AttachRing(grpc::ServerContext* ctx, const pb::AttachRing& req);
  // The rest of a session through a shared-memory ring
  // (common/shm_ring.h), until the client closes it or the stream ends.
  // `served`: the request count when the ring was acknowledged.
  void ServeRing(grpc::ServerContext* ctx, ShmRing* ring, uint32_t served);
  // One request of a session into `resp` (its result, or the call's status),
  // counted in the metrics under its method.
  void AnswerSessionCall(grpc::ServerContext* ctx, const pb::SessionRequest& req, pb::SessionResponse* resp);
  // One request of a session, served as its unary RPC would be.
  grpc::Status ServeSessionCall(grpc::ServerContext* ctx, const pb::SessionRequest& req,
                                pb::SessionResponse* resp);

  ServerState* state_;
  absl::Mutex sessions_mu_;
  std::vector<grpc::ServerContext*> sessions_ ABSL_GUARDED_BY(sessions_mu_);
  bool sessions_closed_ ABSL_GUARDED_BY(sessions_mu_) = false;
};

// The uid of the local process at the other end of a loopback TCP call
// (ctx->peer() "ipv4:127.0.0.1:PORT" or "ipv6:[::1]:PORT"): the established
// socket bound to that port in /proc/net/tcp{,6} names its owner. NOT_FOUND
// for a peer that is not such a socket (another host, a Unix socket). What
// shared memory (a session's ring, a buffer's region) is checked against.
absl::StatusOr<uint32_t> LoopbackPeerUid(const std::string& peer);

// Device `d` of the node as DeviceService.List shows it.
void FillDevice(ServerState* state, int d, pb::Device* out);

class DeviceServiceImpl final : public pb::DeviceService::Service {
 public:
  explicit DeviceServiceImpl(ServerState* state) : state_(state) {}
  // A fleet (--job_store=postgres://...): adds the node id and the other
  // nodes to every List. Set before serving.
  void set_fleet_view(std::function<void(pb::ListDevicesResponse*)> view) { fleet_view_ = std::move(view); }
  grpc::Status List(grpc::ServerContext* ctx, const pb::ListDevicesRequest* req,
                    pb::ListDevicesResponse* resp) override;
  // Admin only (PERMISSION_DENIED otherwise).
  grpc::Status Drain(grpc::ServerContext* ctx, const pb::DrainDeviceRequest* req,
                     pb::Device* resp) override;
  // Admin only: the device's health probe now (device_health.h).
  grpc::Status Probe(grpc::ServerContext* ctx, const pb::ProbeDeviceRequest* req,
                     pb::ProbeDeviceResponse* resp) override;
  void set_health_monitor(DeviceHealthMonitor* health) { health_ = health; }

 private:
  ServerState* state_;
  DeviceHealthMonitor* health_ = nullptr;
  std::function<void(pb::ListDevicesResponse*)> fleet_view_;
};

}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_SERVICES_H_
