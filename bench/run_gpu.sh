#!/usr/bin/env bash
# On the GPU machine, from the repo root, with .bundle/ carried (bench/bundle.sh):
# runs the CUDA tests and benchmarks, then the torch peers, and prints a short
# table last. Full logs go to $OUT (or /tmp/gpu_run) when set.
#   bench/run_gpu.sh [--no-tests] [--no-peers]
set -uo pipefail
cd "$(dirname "$0")/.."
LOG=${OUT:-/tmp/gpu_run}
mkdir -p "$LOG"
run_tests=1; run_peers=1
for a in "$@"; do
  case "$a" in --no-tests) run_tests=0 ;; --no-peers) run_peers=0 ;; esac
done
export LD_LIBRARY_PATH=$PWD/.bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee "$LOG/nvidia_smi.txt"

summary=()
if [ $run_tests = 1 ]; then
  for t in .bundle/bin/*_test; do
    [ -x "$t" ] || continue
    n=$(basename "$t")
    timeout ${TEST_TIMEOUT:-90} "$t" >"$LOG/$n.log" 2>&1
    rc=$?
    grep -E "^\s+.*rel_rms|Failure|^Expected|which is|^\[  (FAILED|PASSED|SKIPPED) |device 0:|after the fault" "$LOG/$n.log" | head -150
    summary+=("$n: $([ $rc = 0 ] && echo PASS || echo "FAIL rc=$rc")")
  done
fi
for b in .bundle/bin/*_bench; do
  [ -x "$b" ] || continue
  n=$(basename "$b")
  timeout ${BENCH_TIMEOUT:-90} "$b" 2>&1 | tee "$LOG/$n.txt"
done
if [ $run_peers = 1 ]; then
  PYTHONUNBUFFERED=1 LD_LIBRARY_PATH= timeout ${PEERS_TIMEOUT:-90} python3 bench/peers.py 2>&1 | tee "$LOG/peers.txt"
fi

echo
echo "==== summary ===="
for s in "${summary[@]}"; do echo "$s"; done
if [ -f "$LOG/attention_cuda_bench.txt" ]; then
  echo "-- ours (attention_cuda_bench) --"
  grep -E '^\| (mma|wgmma|auto)' "$LOG/attention_cuda_bench.txt"
fi
if [ -f "$LOG/peers.txt" ]; then
  echo "-- peers (torch SDPA) --"
  grep '^| (' "$LOG/peers.txt"
fi
