#!/usr/bin/env bash
# Users' kernels in the FROM scratch image (issue 18): the image built with
# make_bundle.sh --user-kernels carries the kernel worker beside the server
# and Debian's g++ toolchain, so a node that runs only the image builds and
# runs users' C++ kernels. Runs it as compose.yaml does (uid 10001,
# read-only root, all capabilities dropped, no new privileges) on the cpu
# backend and, with kernelctl from outside: the example kernel passes the
# gate beside the built-in cpu variant and reaches the leaderboard; a source
# that does not compile returns the compile log; a write past the output and
# a hang fail their own jobs (ABORTED, DEADLINE_EXCEEDED) while the server
# keeps serving; SIGTERM exits 0.
#
# Skips (exit 0, with a message) where podman is missing or unusable, or
# where g++ is not installed from Debian's packages (make_bundle.sh copies
# it). Run directly or via
#   bazel test //tests:container_user_kernel_test
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/container_lib.sh" || exit 1

require_podman
command -v dpkg-query >/dev/null 2>&1 || skip "not a Debian host: make_bundle.sh --user-kernels copies Debian's g++"
grep -q "install ok installed" <<<"$(dpkg-query -W -f='${Status}' g++-12 2>/dev/null)" ||
  skip "g++-12 is not installed (apt-get install g++)"

find_binaries server/kernelserve client/kernelctl server/user_kernels/kernel_worker
example="$root/kernels/api/examples/cpu/attention.cc"
[ -f "$example" ] || fail "missing $example"
require_usable_podman
start_scratch ks-uk
build_image Containerfile --user-kernels
[ -x "$work/ctx/bundle/opt/kernelserve/bin/user_kernels/kernel_worker" ] || fail "no kernel_worker in the bundle"

# Loopback-published, without TLS (--insecure): this test is about the kernels.
podman run -d --name "$name" --read-only --cap-drop=ALL --security-opt=no-new-privileges \
  -p 127.0.0.1::50051 "$tag" --listen=0.0.0.0:50051 --insecure --backend=cpu --data_dir=/tmp/ks \
  --user_kernel_deadline_s=3 >/dev/null || fail "podman run"
published_port port 50051
ctl=("$kernelctl" --server="127.0.0.1:$port" --timeout=120)
wait_serving "${ctl[@]}"
logs=$(podman logs "$name" 2>&1)
[[ "$(grep "user kernels: cpu: /usr/bin/" <<<"$logs")" == *g++* ]] ||
  fail "the server found no g++ in the image: $(echo "$logs" | grep 'user kernels')"
shape=(--batch=1 --heads=2 --seq=64 --head-dim=64 --causal)

# The example beside the built-in variant: both pass, the user kernel ranked.
out=$("${ctl[@]}" submit --op=attention --kernel="$example" "${shape[@]}" --baseline=cpu --kernel-flags=-O3 \
  --warmup=2 --iters=5 2>"$work/err") || fail "submit of the example: $out $(cat "$work/err")"
grep -q "| user:attention | pass |" <<<"$out" || fail "the example did not pass: $out"
grep -q "| cpu | pass |" <<<"$out" || fail "cpu did not pass: $out"
grep -q "user:attention (sha256 " "$work/err" || fail "no sha256: $(cat "$work/err")"
board=$("${ctl[@]}" leaderboard --op=attention "${shape[@]}") || fail "leaderboard: $board"
grep -q "| 1 | user:attention |" <<<"$board" || fail "not on the leaderboard: $board"

# A source that does not compile: exit 1, the compile log from the image's g++.
printf 'int broken( {\n' > "$work/bad.cc"
"${ctl[@]}" submit --op=attention --kernel="$work/bad.cc" "${shape[@]}" >"$work/out" 2>"$work/err" &&
  fail "a broken source was accepted"
grep -q "bad.cc does not compile" "$work/err" || fail "no compile error: $(cat "$work/err")"
grep -q "error:" "$work/err" || fail "no compile log: $(cat "$work/err")"

# A write past the output and a hang: their jobs fail, the server serves on.
kernel() {
  printf '#include "kernels/api/user_kernel_abi.h"\nextern "C" {\nKS_USER_ABI_DEFINE_VERSION();\n'
  printf 'int ks_user_attention_v1(const ks_attention_args_v1* a, void*) {\n%s\n  return 0;\n}\n}\n' "$1"
}
kernel 'volatile uint16_t* o = a->out; o[a->batch * a->heads_q * a->seq_q * a->head_dim + 7] = 1;' > "$work/past.cc"
"${ctl[@]}" submit --op=attention --kernel="$work/past.cc" "${shape[@]}" >"$work/out" 2>"$work/err" &&
  fail "a write past the output passed"
grep -q "ABORTED" "$work/err" && grep -q "outside its output" "$work/err" ||
  fail "write past the output: $(cat "$work/err")"
kernel 'volatile int spin = 1; while (spin) {}' > "$work/hang.cc"
"${ctl[@]}" submit --op=attention --kernel="$work/hang.cc" "${shape[@]}" >"$work/out" 2>"$work/err" &&
  fail "a hanging kernel passed"
grep -q "DEADLINE_EXCEEDED" "$work/err" && grep -q "did not finish within 3 s" "$work/err" ||
  fail "hang: $(cat "$work/err")"
out=$("${ctl[@]}" bench --op=attention "${shape[@]}" --variants=cpu --warmup=1 --iters=2 2>&1) ||
  fail "a built-in job after the bad kernels: $out"
grep -q "| cpu | pass |" <<<"$out" || fail "cpu after the bad kernels: $out"

stop_expect_exit_0
echo "PASS: $tag ($(podman image inspect --format '{{.Size}}' "$tag") bytes) built and ran users' kernels with its" \
  "own g++ and kernel_worker as uid 10001 with a read-only root: the example passed beside cpu and was ranked, a" \
  "compile error, a write past the output and a hang each failed alone; stopped with exit 0"
