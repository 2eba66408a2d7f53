// sm_90 synchronization and copy primitives of the warp-specialized kernels:
// mbarriers (stage rings between a producer and its consumers), named
// barriers (consumer ping-pong), setmaxnreg (registers moved from the
// producer warpgroup to the consumers), TMA tile loads and bulk copies
// (cp.async.bulk[.tensor] completing on an mbarrier). One copy each.
#ifndef KERNELSERVE_KERNELS_GPU_ARCH_SM90_PIPELINE_CUH_
#define KERNELSERVE_KERNELS_GPU_ARCH_SM90_PIPELINE_CUH_

#include <cstdint>

namespace kernelserve {
namespace gpu {
namespace sm90 {

// Barrier of `count` arrivals per phase at shared address `bar` (8 bytes).
__device__ __forceinline__ void MbarInit(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// Makes initialized barriers visible to the async proxy (TMA's complete_tx)
// before the CTA barrier that publishes them.
__device__ __forceinline__ void FenceMbarInit() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

__device__ __forceinline__ void MbarArrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// One arrival, if `pred`: predicated rather than branched, so the consumers'
// code between wgmma issue and wait stays free of divergent branches.
__device__ __forceinline__ void MbarArriveIf(uint32_t bar, bool pred) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.u32 p, %1, 0;\n"
      "@p mbarrier.arrive.shared::cta.b64 _, [%0];\n}\n" ::"r"(bar),
      "r"(static_cast<uint32_t>(pred))
      : "memory");
}

// The producer's arrival on a full barrier: one arrival plus `bytes` of
// transactions that the TMA loads issued next will complete.
__device__ __forceinline__ void MbarArriveExpectTx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

// Spins until the phase of parity `parity` has completed. A fresh barrier is
// in phase 0, so waiting on parity 1 returns at once (the producer's first
// pass over the empty barriers). A wait that lasts kMbarWatchdogNs (a
// million times a normal one) traps: a protocol error in the ring then ends
// the launch with an error instead of hanging the process.
constexpr uint64_t kMbarWatchdogNs = 4000000000ull;
__device__ __forceinline__ void MbarWait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done, waiting;\n.reg .u64 t0, t;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@done bra MBAR_DONE;\n"
      "mov.u64 t0, %%globaltimer;\n"
      "MBAR_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@done bra MBAR_DONE;\n"
      "mov.u64 t, %%globaltimer;\n"
      "sub.u64 t, t, t0;\n"
      "setp.lt.u64 waiting, t, %2;\n"
      "@waiting bra MBAR_WAIT;\n"
      "trap;\n"
      "MBAR_DONE:\n}\n" ::"r"(bar),
      "r"(parity), "l"(kMbarWatchdogNs)
      : "memory");
}

// MbarWait for a warp that has nothing else to issue while it waits (a
// producer ahead of its consumers): each try_wait may suspend the warp up to
// kMbarSuspendNs until the phase completes, where the plain try_wait comes
// back after a short system-defined time and the loop re-issues; those
// retries took issue slots from the consumer warps of the same SM
// sub-partitions (bench/NOTES.md, FP8 attention v5).
constexpr uint32_t kMbarSuspendNs = 1000000;
__device__ __forceinline__ void MbarWaitSleep(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done, waiting;\n.reg .u64 t0, t;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@done bra MBAR_SLEEP_DONE;\n"
      "mov.u64 t0, %%globaltimer;\n"
      "MBAR_SLEEP_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1, %3;\n"
      "@done bra MBAR_SLEEP_DONE;\n"
      "mov.u64 t, %%globaltimer;\n"
      "sub.u64 t, t, t0;\n"
      "setp.lt.u64 waiting, t, %2;\n"
      "@waiting bra MBAR_SLEEP_WAIT;\n"
      "trap;\n"
      "MBAR_SLEEP_DONE:\n}\n" ::"r"(bar),
      "r"(parity), "l"(kMbarWatchdogNs), "r"(kMbarSuspendNs)
      : "memory");
}

// Named barriers 1..15 (0 is __syncthreads). `threads` counts both the
// threads that sync and those that only arrive.
__device__ __forceinline__ void NamedBarrierSync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void NamedBarrierArrive(uint32_t id, uint32_t threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// Predicated, for the same reason as MbarArriveIf.
__device__ __forceinline__ void NamedBarrierArriveIf(uint32_t id, uint32_t threads, bool pred) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.u32 p, %2, 0;\n"
      "@p bar.arrive %0, %1;\n}\n" ::"r"(id),
      "r"(threads), "r"(static_cast<uint32_t>(pred))
      : "memory");
}

// An arrival on `bar` once every cp.async this thread issued before it has
// landed (without raising the pending count: the barrier's init count
// includes these arrivals), so consumers wait on the mbarrier instead of a
// CTA barrier.
__device__ __forceinline__ void CpAsyncMbarArrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// Per-thread register limits of a whole warpgroup (sm_90a); they take effect
// only under a launch-bounds register cap, one role per branch.
template <int kRegs>
__device__ __forceinline__ void SetMaxNRegDec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void SetMaxNRegInc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// Warp-uniform copy of a value (lane 0's): lets ptxas see that a role
// decided from threadIdx is the same for the whole warp.
__device__ __forceinline__ int WarpUniform(int v) { return __shfl_sync(0xffffffffu, v, 0); }

// kBytes contiguous bytes from global memory to shared `dst`, completing
// `bar`'s transactions. A bulk copy is warp-uniform: one lane of a warp
// issuing several serializes them.
template <uint32_t kBytes>
__device__ __forceinline__ void BulkCopyG2S(uint32_t dst, const void* src, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
      "l"(src), "n"(kBytes), "r"(bar)
      : "memory");
}

// `map` is the generic address of a CUtensorMap kernel parameter
// (__grid_constant__).
__device__ __forceinline__ void PrefetchTensorMap(const void* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// One box of a 4-D tensor map at coordinates (c0..c3) into shared memory at
// `dst`, completing `bar`'s transactions by the box's bytes (out-of-bounds
// elements are written as zeros and counted too).
__device__ __forceinline__ void TmaLoad4d(uint32_t dst, const void* map, uint32_t bar, int c0,
                                          int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}

}  // namespace sm90
}  // namespace gpu
}  // namespace kernelserve

#endif  // KERNELSERVE_KERNELS_GPU_ARCH_SM90_PIPELINE_CUH_
