#!/usr/bin/env bash
# Builds the GPU test binaries and benchmarks here and collects them, with the
# non-glibc shared libraries they load, into .bundle/ (git-ignored), which the
# device run carries: bin/ for executables, lib/ for libraries.
#   bench/bundle.sh [extra bazel targets...]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/tools/bundle_util.sh
RequireCudaBuild bundle.sh

TARGETS=(
  //server:kernelserve
  //client:kernelctl
  //kernels/gpu:gpu_backend_test
  //kernels/gpu/attention:attention_cuda_test
  //kernels/gpu/mla:mla_decode_cuda_test
  //kernels/gpu/decode_attention:decode_attention_cuda_test
  //kernels/gpu/moe:moe_cuda_test
  //kernels/gpu/fp8_attention:fp8_attention_cuda_test
  //bench:attention_cuda_bench
  //bench:mla_cuda_bench
  //bench:decode_attention_cuda_bench
  //bench:moe_cuda_bench
  //bench:fp8_attention_cuda_bench
  //bench:loopback_bench
)
OPTIONAL=()
TARGETS+=("$@")
# Our kernels for bench/peers.py --ours (bench/run_gpu.sh): into lib/, where
# the absl libraries it finds through its rpath ($ORIGIN) are.
SHIM=bazel-bin/bench/libks_peer_shim.so
bazel build "${TARGETS[@]}" //bench:libks_peer_shim.so
for t in ${OPTIONAL[@]+"${OPTIONAL[@]}"}; do
  if bazel build "$t" >/dev/null 2>&1; then TARGETS+=("$t"); else echo "skipping $t (does not build)"; fi
done

rm -rf .bundle
mkdir -p .bundle/bin .bundle/lib
for t in "${TARGETS[@]}"; do
  path="bazel-bin/$(echo "${t#//}" | tr ':' '/')"
  cp -L "$path" .bundle/bin/
  CopyBundleLibs "$path" .bundle/lib
done
cp -L "$SHIM" .bundle/lib/
CopyBundleLibs "$SHIM" .bundle/lib
for b in .bundle/bin/*; do
  if grep -q "not found" <<<"$(LD_LIBRARY_PATH=.bundle/lib ldd "$b")"; then
    echo "bundle: $b misses libraries:"; LD_LIBRARY_PATH=.bundle/lib ldd "$b" | grep "not found"; exit 1
  fi
done
# peers.py runs with an empty library path: the shim's rpath alone must do.
if grep -q "not found" <<<"$(LD_LIBRARY_PATH= ldd .bundle/lib/libks_peer_shim.so)"; then
  echo "bundle: libks_peer_shim.so misses libraries:"; LD_LIBRARY_PATH= ldd .bundle/lib/libks_peer_shim.so | grep "not found"
  exit 1
fi
du -sh .bundle
ls .bundle/bin .bundle/lib | head -100
# The device call carries at most 64 MiB: ship one compressed archive
# (.bundle_pack/bundle.tgz); bench/run_gpu.sh unpacks it into .bundle/ there.
strip --strip-unneeded .bundle/bin/* .bundle/lib/* 2>/dev/null || true
mkdir -p .bundle_pack
tar czf .bundle_pack/bundle.tgz -C .bundle bin lib
du -sh .bundle_pack/bundle.tgz
