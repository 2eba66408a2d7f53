#!/usr/bin/env bash
# On the GPU machine, from the repo root, with .bundle_pack/ carried
# (bench/bundle.sh builds it here): the CUDA tests, the server end to end on the GPU through
# kernelctl (NumPy check and every op against the oracle), our benchmarks,
# then the torch peers in the same call, and a short table last.
# Full logs go to $GPU_LOG (default /tmp/gpu_run), packed as $OUT/gpu_logs.tgz when $OUT is set.
#   bench/run_gpu.sh [--no-tests] [--no-e2e] [--no-peers]
set -uo pipefail
cd "$(dirname "$0")/.."
LOG=${GPU_LOG:-/tmp/gpu_run}  # e.g. GPU_LOG=$OUT/gpu_run: the logs come back even if the call is cut short
mkdir -p "$LOG"
run_tests=1; run_e2e=1; run_peers=1
for a in "$@"; do
  case "$a" in --no-tests) run_tests=0 ;; --no-e2e) run_e2e=0 ;; --no-peers) run_peers=0 ;; esac
done
if [ ! -d .bundle/bin ] && [ -f .bundle_pack/bundle.tgz ]; then
  mkdir -p .bundle && tar xzf .bundle_pack/bundle.tgz -C .bundle
fi
export LD_LIBRARY_PATH=$PWD/.bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee "$LOG/nvidia_smi.txt"
git log -1 --format='commit %h %cd' 2>/dev/null | tee "$LOG/commit.txt"

summary=()
# Tests of kernels written without a device (UNTRIED_FILTER, a gtest filter,
# e.g. '*Pipe*') run in their own processes after the rest, so a fault or an
# mbarrier hang there cannot cost the trusted kernels' results. Every kernel
# in the tree has run on the H200 as of 2026-12-03, so it is empty by default.
untried=${UNTRIED_FILTER:-}
if [ $run_tests = 1 ]; then
  for t in .bundle/bin/*_test; do
    [ -x "$t" ] || continue
    n=$(basename "$t")
    timeout ${TEST_TIMEOUT:-90} "$t" ${untried:+--gtest_filter="-$untried"} >"$LOG/$n.log" 2>&1
    rc=$?
    grep -E "Failure|^\[  (FAILED|SKIPPED) " "$LOG/$n.log" | head -40
    summary+=("$n: $([ $rc = 0 ] && echo PASS || echo "FAIL rc=$rc") ($(grep -cE '^\[       OK' "$LOG/$n.log") ok)")
  done
  for t in .bundle/bin/*_test; do
    [ -n "$untried" ] && [ -x "$t" ] || continue
    n=$(basename "$t")
    grep -q '^  ' <<<"$("$t" --gtest_filter="$untried" --gtest_list_tests 2>/dev/null)" || continue
    timeout ${UNTRIED_TIMEOUT:-90} "$t" --gtest_filter="$untried" >"$LOG/$n.untried.log" 2>&1
    rc=$?
    grep -E "Failure|^\[  (FAILED|SKIPPED) " "$LOG/$n.untried.log" | head -20
    summary+=("$n (untried kernels, $untried): $([ $rc = 0 ] && echo PASS || echo "FAIL rc=$rc") ($(grep -cE '^\[       OK' "$LOG/$n.untried.log") ok)")
  done
fi
if [ $run_e2e = 1 ]; then
  timeout 120 python3 tests/npy_check.py --kernelctl=.bundle/bin/kernelctl \
    --kernelserve=.bundle/bin/kernelserve --backend=cuda --large >"$LOG/npy_check.log" 2>&1
  rc=$?; tail -n 8 "$LOG/npy_check.log"
  summary+=("npy_check (server --backend=cuda, NumPy fp64): $([ $rc = 0 ] && echo PASS || echo "FAIL rc=$rc")")
  timeout 240 python3 bench/gpu_ops_e2e.py --bin=.bundle/bin --backend=auto --expect=cuda \
    >"$LOG/gpu_ops_e2e.log" 2>&1
  rc=$?; cat "$LOG/gpu_ops_e2e.log"
  summary+=("gpu_ops_e2e (every op via kernelctl, --backend=auto): $([ $rc = 0 ] && echo PASS || echo "FAIL rc=$rc")")
fi
for b in .bundle/bin/*_bench; do
  [ -x "$b" ] || continue
  n=$(basename "$b")
  args=()
  [ "$n" = loopback_bench ] && args=(--backend=cuda)  # uploads into device memory
  timeout ${BENCH_TIMEOUT:-90} "$b" "${args[@]}" >"$LOG/$n.txt" 2>&1
done
if [ $run_peers = 1 ]; then
  PYTHONUNBUFFERED=1 LD_LIBRARY_PATH= timeout ${PEERS_TIMEOUT:-90} python3 bench/peers.py >"$LOG/peers.txt" 2>&1
  PYTHONUNBUFFERED=1 LD_LIBRARY_PATH= timeout ${PEERS_TIMEOUT:-90} python3 bench/peers_moe_mla.py >"$LOG/peers_moe_mla.txt" 2>&1
  # Then our bf16 and FP8 attention timed in the peers' process, interleaved
  # with them (bench/peer_shim.cc), when the bundle has the shim: a separate
  # run, so the peers' own figures above stand whatever the shim does.
  if [ -f .bundle/lib/libks_peer_shim.so ]; then
    PYTHONUNBUFFERED=1 LD_LIBRARY_PATH= timeout ${PEERS_OURS_TIMEOUT:-240} python3 bench/peers.py \
      --ours .bundle/lib/libks_peer_shim.so --ours-fp8 >"$LOG/peers_ours.txt" 2>&1
  fi
fi

echo
echo "==== summary ===="
for s in "${summary[@]}"; do echo "$s"; done
for f in attention_cuda_bench fp8_attention_cuda_bench mla_cuda_bench decode_attention_cuda_bench moe_cuda_bench loopback_bench peers peers_moe_mla peers_ours; do
  [ -f "$LOG/$f.txt" ] || continue
  echo "-- $f --"
  grep -E '^\|' "$LOG/$f.txt" | grep -vE '^\| -+' | head -40
done
[ -n "${OUT:-}" ] && tar czf "$OUT/gpu_logs.tgz" -C "$(dirname "$LOG")" "$(basename "$LOG")"
