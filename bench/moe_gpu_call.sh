#!/usr/bin/env bash
# One device call for an MoE kernel A/B (issue 16), from the root of the
# checkout the device tool sends, with one carried folder holding this
# script, bundle.tgz (bench/bundle.sh's .bundle_pack/bundle.tgz of the
# candidate) and base_moe_cuda_bench (the baseline's //bench:moe_cuda_bench,
# stripped; it loads the bundle's libraries); LOOPBACK=1 adds loopback_bench
# on the GPU host:
#   bash <folder>/moe_gpu_call.sh
# The candidate's newest tests first under a timeout (new barrier code: a
# hang must not cost the rest), the whole MoE test, candidate against
# baseline alternated twice, torch._grouped_mm in the same call, and ncu on
# down and the layer's down at T = 8192 for both binaries last (what a short
# device call can lose). Logs under $OUT; a short table last.
set -uo pipefail
D=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/moe_out}
mkdir -p "$OUT" /tmp/moeb
tar xzf "$D/bundle.tgz" -C /tmp/moeb
export LD_LIBRARY_PATH=/tmp/moeb/lib
B=/tmp/moeb/bin
MAIN=$D/base_moe_cuda_bench
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv \
  | tee "$OUT/info.txt"
t0=$(date +%s)
new='*EpilogueRowWidths*:*EveryTileWidth*:*MoeForcedGemmTest*'
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
    timeout 150 "$B/moe_cuda_bench" $tokens --variants=default >>"$OUT/bench.txt" 2>&1
  fi
  if [ -x "$MAIN" ]; then
    echo "== base, round $round" >>"$OUT/bench.txt"
    timeout 120 "$MAIN" $tokens --variants=default >>"$OUT/bench.txt" 2>&1
  fi
done
echo "bench done at +$(( $(date +%s) - t0 )) s"
PYTHONUNBUFFERED=1 LD_LIBRARY_PATH= timeout 120 python3 bench/peers_moe_mla.py --tokens 4096 8192 16384 \
  >"$OUT/peers.txt" 2>&1
echo "peers done at +$(( $(date +%s) - t0 )) s"

# The service on this host with session 39's transfer changes (download
# staging through the backend, one malloc arena): against session 38's run
# of the same command on an H100 (bench/RESULTS.md), not in this call.
if [ "${LOOPBACK:-0}" = 1 ] && [ $(( $(date +%s) - t0 )) -lt 380 ]; then
  timeout 90 "$B/loopback_bench" --backend=cuda --mib=64 >"$OUT/loopback.txt" 2>&1
fi
# The same with the host's CPU wake-up latency request held at 0 µs
# (kernelserve --cpu_dma_latency_us=0): what idle-state exits cost a call here.
if [ "${LOOPBACK:-0}" = 1 ] && [ $(( $(date +%s) - t0 )) -lt 430 ]; then
  timeout 90 "$B/loopback_bench" --backend=cuda --mib=64 --cpu_dma_latency_us=0 >"$OUT/loopback_lat0.txt" 2>&1
fi
echo "loopback done at +$(( $(date +%s) - t0 )) s"

# Where down's time goes: the tensor pipe, the issue slots, the stores and
# DRAM, and what the warps wait on.
metrics=gpu__time_duration.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active
metrics+=,smsp__issue_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed
metrics+=,l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum,l1tex__t_requests_pipe_lsu_mem_global_op_st.sum
metrics+=,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio
metrics+=,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio
metrics+=,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio
metrics+=,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio
metrics+=,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio
: >"$OUT/ncu.txt"
for bin in "$B/moe_cuda_bench" "$MAIN"; do
  [ -x "$bin" ] || continue
  [ "$bin" = "$B/moe_cuda_bench" ] && [ $rc_new -ne 0 ] && continue
  for proj in down layer; do
    if [ $(( $(date +%s) - t0 )) -gt 520 ]; then break 2; fi
    echo "== $proj T = 8192, $bin" >>"$OUT/ncu.txt"
    timeout 40 ncu --clock-control none --kernel-name regex:WgmmaRs --launch-count 1 --launch-skip 1 \
      --metrics "$metrics" "$bin" --tokens=8192 --projections="$proj" --variants=default 2>&1 \
      | grep -vE '^\|' >>"$OUT/ncu.txt"
  done
done
echo "ncu done at +$(( $(date +%s) - t0 )) s"

echo "==== summary ===="
echo "new epilogue's tests: rc=$rc_new; the rest of moe_cuda_test: rc=$rc_all"
cat "$OUT"/tests_*.log | grep -E "^\[  (PASSED|FAILED) |Failure" | head -30
grep -E '^==|^\| [0-9]' "$OUT/bench.txt" | grep -E '^==|gate/up|down|layer' | cut -c1-160
grep -E '^\|' "$OUT/peers.txt" | grep -vE '^\| -+' | head -20
grep -E "==|gmma|issue_active|dram|op_st|stalled|time_duration" "$OUT/ncu.txt" | head -48
for f in loopback loopback_lat0; do
  echo "== $f"; grep -E "List round|small call|through a shared|upload|download|remote call over" "$OUT/$f.txt" 2>/dev/null | cut -c1-200
done
