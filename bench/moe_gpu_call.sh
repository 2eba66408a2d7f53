#!/usr/bin/env bash
# One device call for branch s37-rs-dequant (issue 16's wgmma_rs changes) and
# the service's CPU latency request (issue 20), from the root of the checkout
# the device tool sends, with one carried folder holding this script,
# bundle.tgz (the branch's bench/bundle.sh .bundle_pack/bundle.tgz),
# and main_moe_cuda_bench (main's build of //bench:moe_cuda_bench, stripped:
# the A/B's baseline; it loads the bundle's libraries); the peers come from
# the checkout's bench/peers_moe_mla.py:
#   bash <folder>/moe_gpu_call.sh
# The new kernels' tests run first in their own process under a timeout (new
# mbarrier code: a hang must not cost the rest); then the whole MoE test, the
# branch's kernels against main's alternated twice, torch._grouped_mm in the
# same call, loopback_bench with and without --cpu_dma_latency_us=0
# alternated (twice when there is time), and ncu on gate/up and down at
# T = 8192 last (what a short device call can lose). Logs under $OUT; a short
# table last.
set -uo pipefail
D=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/moe_out}
mkdir -p "$OUT" /tmp/moeb
tar xzf "$D/bundle.tgz" -C /tmp/moeb
export LD_LIBRARY_PATH=/tmp/moeb/lib
B=/tmp/moeb/bin
MAIN=$D/main_moe_cuda_bench
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv \
  | tee "$OUT/info.txt"
t0=$(date +%s)
new='*WarpsOnBothScalePaths*:*ScalesOfOneMultiplyOnly*:*MoeWgmmaRsTest*'
timeout 120 "$B/moe_cuda_test" --gtest_filter="$new" >"$OUT/tests_new.log" 2>&1
rc_new=$?
rc_all=skipped
if [ $rc_new -ne 124 ] && [ $rc_new -ne 137 ]; then
  timeout 150 "$B/moe_cuda_test" --gtest_filter="-$new" >"$OUT/tests_rest.log" 2>&1
  rc_all=$?
fi
echo "tests done at +$(( $(date +%s) - t0 )) s: new rc=$rc_new, rest rc=$rc_all"

tokens=--tokens=4096,8192,16384
: >"$OUT/bench.txt"
for round in 1 2; do
  if [ $rc_new -eq 0 ]; then
    echo "== branch, round $round" >>"$OUT/bench.txt"
    timeout 120 "$B/moe_cuda_bench" $tokens --variants=default,wgmma_rs_b_streamed >>"$OUT/bench.txt" 2>&1
  fi
  if [ -x "$MAIN" ]; then
    echo "== main, round $round" >>"$OUT/bench.txt"
    timeout 120 "$MAIN" $tokens --variants=default >>"$OUT/bench.txt" 2>&1
  fi
done
echo "bench done at +$(( $(date +%s) - t0 )) s"
PYTHONUNBUFFERED=1 LD_LIBRARY_PATH= timeout 120 python3 bench/peers_moe_mla.py --tokens 4096 8192 16384 \
  >"$OUT/peers.txt" 2>&1
echo "peers done at +$(( $(date +%s) - t0 )) s"

: >"$OUT/loopback.txt"
for round in 1 2; do
  # The device call's limit is 600 s: a second round only if there is time.
  if [ $round -eq 2 ] && [ $(( $(date +%s) - t0 )) -gt 300 ]; then break; fi
  for lat in -1 0; do
    echo "== --cpu_dma_latency_us=$lat, round $round" >>"$OUT/loopback.txt"
    timeout 80 "$B/loopback_bench" --backend=cuda --mib=64 --cpu_dma_latency_us=$lat >>"$OUT/loopback.txt" 2>&1
  done
done
echo "loopback done at +$(( $(date +%s) - t0 )) s"

metrics=gpu__time_duration.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active
metrics+=,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active
metrics+=,smsp__issue_active.avg.pct_of_peak_sustained_active
: >"$OUT/ncu.txt"
if [ $rc_new -eq 0 ]; then
  for proj in gate/up down; do
    echo "== $proj T = 8192, default (branch)" >>"$OUT/ncu.txt"
    timeout 60 ncu --clock-control none --kernel-name regex:WgmmaRs --launch-count 1 --metrics "$metrics" \
      "$B/moe_cuda_bench" --tokens=8192 --projections="$proj" --variants=default 2>&1 | grep -vE '^\|' >>"$OUT/ncu.txt"
  done
fi
echo "ncu done at +$(( $(date +%s) - t0 )) s"

echo "==== summary ===="
echo "new kernels' tests: rc=$rc_new; the rest of moe_cuda_test: rc=$rc_all"
cat "$OUT"/tests_*.log | grep -E "^\[  (PASSED|FAILED) |Failure" | head -30
grep -E '^==|^\| [0-9]' "$OUT/bench.txt" | grep -E '^==|gate/up|down|layer' | cut -c1-160
grep -E '^\|' "$OUT/peers.txt" | grep -vE '^\| -+' | head -20
grep -E "==|gmma|alu|fma|time_duration|issue_active" "$OUT/ncu.txt" | head -24
grep -E "^==|ping-pong|List round|small call|over a session|remote call over|its phases" "$OUT/loopback.txt" | cut -c1-200
