// Helpers for tests that talk to a real server over loopback with raw stubs.
#ifndef KERNELSERVE_SERVER_TEST_UTIL_H_
#define KERNELSERVE_SERVER_TEST_UTIL_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/channel.h"
#include "grpcpp/support/status.h"
#include "kernels/api/backend.h"
#include "kernels/api/tensor.h"
#include "kernelserve/v1/device.grpc.pb.h"
#include "kernelserve/v1/kernel.grpc.pb.h"
#include "kernelserve/v1/tensor.grpc.pb.h"
#include "server/server.h"

namespace kernelserve {
namespace testing {

namespace pb = ::kernelserve::v1;

// A backend that forwards every call to a real one; tests override the few
// calls whose behaviour they change (an injected fault, deferred copies).
class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}

  std::string Name() const override { return inner_->Name(); }
  int DeviceCount() const override { return inner_->DeviceCount(); }
  BackendCapabilities Capabilities() const override { return inner_->Capabilities(); }
  DeviceInfo GetDeviceInfo(int device) const override { return inner_->GetDeviceInfo(device); }
  absl::StatusOr<std::unique_ptr<DeviceMemory>> Allocate(int device, size_t bytes) override {
    return inner_->Allocate(device, bytes);
  }
  absl::Status CopyToDevice(int device, void* dst, const void* src, size_t bytes) override {
    return inner_->CopyToDevice(device, dst, src, bytes);
  }
  absl::Status CopyToHost(int device, void* dst, const void* src, size_t bytes) override {
    return inner_->CopyToHost(device, dst, src, bytes);
  }
  absl::Status CopyOnDevice(int device, void* dst, const void* src, size_t bytes) override {
    return inner_->CopyOnDevice(device, dst, src, bytes);
  }
  absl::Status Synchronize(int device) override { return inner_->Synchronize(device); }
  absl::Status Attention(int device, const AttentionParams& p, const TensorView& q, const TensorView& k,
                         const TensorView& v, TensorView& out) override {
    return inner_->Attention(device, p, q, k, v, out);
  }
  absl::Status Fp8Attention(int device, const Fp8AttentionParams& p, const Fp8AttentionInputs& in,
                            TensorView& out) override {
    return inner_->Fp8Attention(device, p, in, out);
  }
  absl::Status MlaDecode(int device, const MlaDecodeParams& p, const MlaDecodeInputs& in,
                         TensorView& out) override {
    return inner_->MlaDecode(device, p, in, out);
  }
  absl::Status Moe(int device, const MoeParams& p, const MoeInputs& in, TensorView& out) override {
    return inner_->Moe(device, p, in, out);
  }

 protected:
  Backend& inner() { return *inner_; }

 private:
  std::unique_ptr<Backend> inner_;
};

// A server on 127.0.0.1:0 with the cpu backend.
std::unique_ptr<KernelServer> StartServer(ServerOptions options = {});
// A channel without client-side message limits, so the server's apply.
std::shared_ptr<grpc::Channel> Connect(int port);

// Random bf16 values (Gaussian, rounded to bf16) as a proto tensor.
pb::Tensor RandomBf16(const Shape& shape, uint64_t seed);
pb::Tensor RandomBytes(pb::DType dtype, const Shape& shape, uint64_t seed);
HostTensor ToHost(const pb::Tensor& t);

// Upload in chunks of `chunk_bytes`; returns the status and the info.
grpc::Status Upload(pb::BufferService::Stub* stub, const pb::Tensor& t, int64_t chunk_bytes,
                    pb::BufferInfo* info);
// Download all bytes of a buffer (checks offsets are contiguous).
grpc::Status Download(pb::BufferService::Stub* stub, const std::string& id, int64_t chunk_bytes,
                      std::string* bytes, int* chunks = nullptr);

// Polls DeviceService.List (not a fixed sleep: a loaded machine is slow to
// send) until device 0's worker holds at least `depth` calls, running and
// queued together; false after ~5 s.
bool WaitQueueDepth(pb::DeviceService::Stub* devices, int depth);

// Calls with serialized messages, decodable or not, on any method
// ("/kernelserve.v1.PoolService/Read"), with `metadata` added (e.g.
// {"authorization", "Bearer tok"}).
struct RawCall {
  std::string method;
  std::vector<std::pair<std::string, std::string>> metadata;
  std::chrono::milliseconds timeout = std::chrono::seconds(20);
};
grpc::Status RawUnary(grpc::Channel* channel, const RawCall& call, const std::string& request,
                      std::string* response = nullptr);
grpc::Status RawClientStream(grpc::Channel* channel, const RawCall& call, const std::vector<std::string>& messages,
                             std::string* response = nullptr);
// A bidirectional stream: `messages` written (from a second thread, so a
// server that answers each one is never blocked on a reader), the answers
// read to the end of the stream, or `max_messages` (> 0) of them and then
// cancelled.
grpc::Status RawBidiStream(grpc::Channel* channel, const RawCall& call, const std::vector<std::string>& messages,
                           int max_messages = 0, std::vector<std::string>* responses = nullptr);
// Reads the stream to its end, or `max_messages` (> 0) of it and then cancels.
grpc::Status RawServerStream(grpc::Channel* channel, const RawCall& call, const std::string& request,
                             int max_messages = 0, std::vector<std::string>* messages = nullptr);

// grpc.health.v1.Health/Check as a raw call (the health proto is not installed
// as headers here); `service` empty asks for the whole server. On OK, `reply`
// gets the encoded response: "\x08\x01" is SERVING, "\x08\x02" NOT_SERVING.
grpc::Status HealthCheck(grpc::Channel* channel, const std::string& service = "",
                         std::string* reply = nullptr);

}  // namespace testing
}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_TEST_UTIL_H_
