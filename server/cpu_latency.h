// A PM QoS CPU latency request (/dev/cpu_dma_latency), held while serving.
//
// Why: a call's round trip wakes several threads (gRPC's pollers, the
// handler, the client). On an idle host each wake-up leaves a CPU idle state
// first, and deep states take tens to hundreds of microseconds to leave,
// which is most of a small call's time and of a long kernel's return. Linux
// keeps every CPU out of idle states slower than the requested latency for
// as long as the requesting file stays open (the kernel's PM QoS interface;
// tuned's latency-performance profile uses the same). It costs idle power,
// so it is opt-in: --cpu_dma_latency_us.
#ifndef KERNELSERVE_SERVER_CPU_LATENCY_H_
#define KERNELSERVE_SERVER_CPU_LATENCY_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace kernelserve {

inline constexpr char kCpuDmaLatencyPath[] = "/dev/cpu_dma_latency";

class CpuLatencyRequest {
 public:
  // Requests at most `us` microseconds of wake-up latency through `path`
  // until the object is destroyed. Fails (FAILED_PRECONDITION, naming the
  // file and the reason) where the file cannot be opened or written: it
  // needs root or write access to the device.
  static absl::StatusOr<CpuLatencyRequest> Hold(int32_t us, const std::string& path = kCpuDmaLatencyPath);

  CpuLatencyRequest(CpuLatencyRequest&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  CpuLatencyRequest& operator=(CpuLatencyRequest&& other) noexcept;
  CpuLatencyRequest(const CpuLatencyRequest&) = delete;
  CpuLatencyRequest& operator=(const CpuLatencyRequest&) = delete;
  ~CpuLatencyRequest();  // the request ends with the file's last close

 private:
  explicit CpuLatencyRequest(int fd) : fd_(fd) {}
  int fd_;
};

// The latency the kernel enforces now (reading the file gives the strictest
// request of all holders), in microseconds.
absl::StatusOr<int32_t> CurrentCpuLatency(const std::string& path = kCpuDmaLatencyPath);

}  // namespace kernelserve

#endif  // KERNELSERVE_SERVER_CPU_LATENCY_H_
