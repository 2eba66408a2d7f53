#!/usr/bin/env bash
# Builds tests/fuzz/request_fuzzer.cc as a real libFuzzer binary with clang
# (-fsanitize=fuzzer,address; the server and kernels are instrumented too),
# outside Bazel, whose toolchain here is gcc. The source list comes from
# `bazel query` on //tests/fuzz:request_fuzzer, so it follows the tree. It is
# configured as a build without GPU toolchains (no .cu code under clang): its
# own local_config_*/config.h say so, and --backend=auto falls back to the CPU
# backend exactly as in a build on a machine without nvcc.
#
#   tests/fuzz/build_libfuzzer.sh [OUT_DIR]        default /tmp/ks_libfuzzer
#   OUT_DIR/request_fuzzer OUT_DIR/corpus -max_total_time=60 -rss_limit_mb=4096
#
# Needs clang-14 (Debian: clang-14, libclang-rt-14-dev for the fuzzer runtime).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-/tmp/ks_libfuzzer}
cxx=${CXX:-clang++-14}
command -v "$cxx" >/dev/null || { echo "build_libfuzzer.sh: $cxx not found" >&2; exit 1; }
# Objects are rebuilt every time: a header change (a struct growing a field)
# with stale objects gives an ODR-broken binary that fails in odd places.
rm -rf "$out/obj"
mkdir -p "$out/obj"

bazel build //tests/fuzz:request_fuzzer //tests/fuzz:fuzz_requests_test >/dev/null
srcs=$(bazel query 'kind("source file", deps(//tests/fuzz:request_fuzzer))' 2>/dev/null |
  grep -v '^@' | grep -E '\.cc$' | grep -v '^//kernels/gpu' | sed -e 's|^//||' -e 's|:|/|')
# Generated sources too (the protos, the user-kernel ABI headers as strings).
gen=$(bazel query 'kind("generated file", deps(//tests/fuzz:request_fuzzer))' 2>/dev/null |
  grep -v '^@' | grep -E '\.cc$' | grep -v '^//kernels/gpu' | sed -e 's|^//|bazel-bin/|' -e 's|:|/|')
mkdir -p "$out/inc/local_config_cuda" "$out/inc/local_config_hip"
printf '%s\n' '#define KERNELSERVE_HAVE_CUDA 0' \
  '#define KERNELSERVE_CUDA_BUILD_NOTE "the libFuzzer build compiles no CUDA code"' \
  >"$out/inc/local_config_cuda/config.h"
printf '%s\n' '#define KERNELSERVE_HIP_TOOLCHAIN 0' \
  '#define KERNELSERVE_HIP_BUILD_NOTE "the libFuzzer build compiles no HIP code"' \
  '#define KERNELSERVE_HAVE_HIP 0' \
  '#define KERNELSERVE_HIP_BACKEND_NOTE "the libFuzzer build compiles no HIP code"' \
  >"$out/inc/local_config_hip/config.h"
inc=(-I. -I"$out/inc" -Ibazel-bin -Iproto -Ibazel-bin/proto)
flags=(-std=c++17 -O1 -g -fopenmp -march=x86-64-v2 -fsanitize=fuzzer-no-link,address "${inc[@]}" -w)
# A file clang-14 cannot compile (gcc-only extensions, e.g. lambdas capturing
# structured bindings) is built by g++ uninstrumented instead, and listed.
compile() {
  "$cxx" "${flags[@]}" -c "$1" -o "$2" 2>"$2.log" ||
    { g++ -std=c++17 -O1 -g -fopenmp -march=x86-64-v2 "${inc[@]}" -w \
        -c "$1" -o "$2" && echo "  (g++, not instrumented: $1)"; }
}
objs=()
n=0
for src in $srcs $gen; do
  obj="$out/obj/$(echo "$src" | tr '/' '_').o"
  objs+=("$obj")
  compile "$src" "$obj" &
  n=$((n + 1))
  if [ $((n % 2)) = 0 ]; then wait; fi   # 2 cores
done
wait
libs=$(pkg-config --libs grpc++ protobuf absl_flags_parse absl_synchronization absl_statusor absl_str_format spdlog 2>/dev/null)
"$cxx" -fsanitize=fuzzer,address -fopenmp "${objs[@]}" -o "$out/request_fuzzer" \
  -lgrpc++_reflection $libs -lgrpc -lgpr -lssl -lcrypto -lsqlite3 -lpq -lfmt -lpthread -ldl
# The seed corpus, written by the gcc driver.
bazel-bin/tests/fuzz/fuzz_requests_test --write_corpus="$out/corpus" >/dev/null
echo "built $out/request_fuzzer; run: $out/request_fuzzer $out/corpus -max_total_time=60"
