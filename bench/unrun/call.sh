#!/usr/bin/env bash
# One device call for every patch in bench/unrun, from the root of the
# checkout the device tool sends, with the folder prepare.sh packed (this
# script, unrun.tgz: bin/ the patched tests and benchmarks, base/ HEAD's
# benchmarks, lib/ their libraries):
#   [RUN_MOE=0] [RUN_ATTN=0] [RUN_DECODE=1] [RUN_FP8=1] [RUN_CLOCKS=1] [RUN_OURS=1] bash .bundle_pack/call.sh
# Each change's tests first under a timeout (a hang must not cost the rest),
# then patched against base alternated twice, the peers in the same call
# (torch._grouped_mm; torch SDPA's cuDNN and FA2), the slower whole test
# binaries last. Logs under $OUT; a short table at the end, and each part's
# lines as it finishes (what a cut-off call still returns).
set -uo pipefail
D=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/unrun_out}
mkdir -p "$OUT" /tmp/unrun
tar xzf "$D/unrun.tgz" -C /tmp/unrun
export LD_LIBRARY_PATH=/tmp/unrun/lib
B=/tmp/unrun/bin
BASE=/tmp/unrun/base
t0=$(date +%s)
el() { echo "+$(( $(date +%s) - t0 )) s"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv \
  | tee "$OUT/info.txt"
cat "$D/patches.txt" 2>/dev/null

# RUN_MOE=0 / RUN_ATTN=0 skip a part whose kernels no patch touches;
# RUN_DECODE=1 tests and times MoE decode patched against HEAD even without
# the MoE part; RUN_FP8=1 runs the FP8 attention tests and times it patched
# against HEAD at issue 15's shapes; RUN_CLOCKS=1 samples the SM clock and
# power under our bf16 kernel and cuDNN's at (1,16,32768); RUN_OURS=1 runs
# the peers (with HEAD's kernels beside them) even without either part.
RUN_MOE=${RUN_MOE:-1}
RUN_ATTN=${RUN_ATTN:-1}
RUN_DECODE=${RUN_DECODE:-0}
RUN_FP8=${RUN_FP8:-0}
RUN_CLOCKS=${RUN_CLOCKS:-0}
RUN_OURS=${RUN_OURS:-0}
rc_moe=skipped rc_moe_rest=skipped rc_attn=skipped
# Alternate LOG TESTS_RC TIMEOUT BENCH ARGS...: the patched BENCH (only if its
# tests passed) and HEAD's, alternated twice, into LOG.
Alternate() {
  local log=$1 rc=$2 limit=$3 bench=$4
  shift 4
  : >"$log"
  for round in 1 2; do
    if [ "$rc" = 0 ]; then
      echo "== patched, round $round" >>"$log"
      timeout "$limit" "$B/$bench" "$@" >>"$log" 2>&1
    fi
    echo "== base, round $round" >>"$log"
    timeout "$limit" "$BASE/$bench" "$@" >>"$log" 2>&1
  done
}
: >"$OUT/moe_decode.txt"

# 1. MoE prefill (issue 16), patched against HEAD.
moe_new='*EpilogueRowWidths*:*EveryTileWidth*:*MoeForcedGemmTest*:*WalksWithAShortLastOne*:*Nan*'
if [ "$RUN_MOE" = 1 ]; then
  timeout 120 "$B/moe_cuda_test" --gtest_filter="$moe_new" >"$OUT/moe_tests_new.log" 2>&1
  rc_moe=$?
  echo "moe new tests rc=$rc_moe $(el)"
  Alternate "$OUT/moe_bench.txt" $rc_moe 120 moe_cuda_bench --tokens=4096,8192,16384 --variants=default
  grep -E '^==|^\| [0-9]' "$OUT/moe_bench.txt" | grep -E '^==|gate/up|down' | cut -c1-150
  echo "moe bench done $(el)"
fi

# 2. FP8 attention (issue 15) at its shapes, patched against HEAD (cuDNN bf16
# from peers.py below); the output hash column must match between the two.
rc_fp8=skipped
if [ "$RUN_FP8" = 1 ]; then
  timeout 150 "$B/fp8_attention_cuda_test" >"$OUT/fp8_tests.log" 2>&1
  rc_fp8=$?
  echo "fp8 tests rc=$rc_fp8 $(el)"
  Alternate "$OUT/fp8_bench.txt" $rc_fp8 120 fp8_attention_cuda_bench --issue --modes=lean
  grep -E '^==|^\| ws' "$OUT/fp8_bench.txt" | cut -c1-170
  echo "fp8 bench done $(el)"
fi

# 3. bf16 attention d128 (issue 19), patched against HEAD.
if [ "$RUN_ATTN" = 1 ]; then
  timeout 150 "$B/attention_cuda_test" >"$OUT/attn_tests.log" 2>&1
  rc_attn=$?
  echo "attention tests rc=$rc_attn $(el)"
  Alternate "$OUT/attn_bench.txt" $rc_attn 90 attention_cuda_bench --dims=128 --only=wgmma_ws
  grep -E '^==|^\| wgmma' "$OUT/attn_bench.txt" | cut -c1-150
  echo "attention bench done $(el)"
fi

# 4. Peers in the same call (cuDNN bf16 is the FP8 kernel's peer too). With
# HEAD's shim in lib/ (prepare.sh), HEAD's bf16 and FP8 kernels are timed in
# the peers' process, interleaved with them (bench/peers.py --ours): the
# ratios under one power history.
shim=/tmp/unrun/lib/libks_peer_shim.so
if [ "$RUN_ATTN" = 1 ] || [ "$RUN_FP8" = 1 ] || [ "$RUN_OURS" = 1 ]; then
  ours=()
  [ -f "$shim" ] && ours=(--ours "$shim" --ours-fp8)
  PYTHONUNBUFFERED=1 LD_LIBRARY_PATH='' timeout 200 python3 bench/peers.py --dims 128 ${ours[@]+"${ours[@]}"} \
    >"$OUT/peers.txt" 2>&1
  rc_peers=$?
  echo "peers rc=$rc_peers"
  grep -E '^\||^ours' "$OUT/peers.txt" | grep -vE '^\| -+' | head -40
  if [ "$rc_peers" != 0 ] && [ ${#ours[@]} -gt 0 ]; then
    # The shim failed (a check, or the process): the peers alone, as before it.
    tail -5 "$OUT/peers.txt"
    PYTHONUNBUFFERED=1 LD_LIBRARY_PATH='' timeout 100 python3 bench/peers.py --dims 128 >"$OUT/peers_plain.txt" 2>&1
    grep -E '^\|' "$OUT/peers_plain.txt" | grep -vE '^\| -+' | head -20
  fi
fi
if [ "$RUN_MOE" = 1 ]; then
  PYTHONUNBUFFERED=1 LD_LIBRARY_PATH='' timeout 100 python3 bench/peers_moe_mla.py --tokens 8 32 4096 8192 16384 \
    >"$OUT/peers_moe.txt" 2>&1
  grep -E '^\|' "$OUT/peers_moe.txt" | grep -vE '^\| -+' | head -20
fi
echo "peers done $(el)"

# 5. Decode (issue 16) over T = 4..32, patched against HEAD: the touched
# experts' CTAs fill 2.2..13 waves of 660 slots at T = 4..32; a step in time
# per whole wave is the last partial wave costing a full one.
rc_dec=skipped
if [ "$RUN_MOE" = 1 ] || [ "$RUN_DECODE" = 1 ]; then
  timeout 120 "$B/moe_cuda_test" --gtest_filter='*Stream*:*SplitK*:*FewRowsPerExpert*:*FollowsThePlan*' \
    >"$OUT/moe_tests_decode.log" 2>&1
  rc_dec=$?
  echo "moe decode tests rc=$rc_dec $(el)"
  Alternate "$OUT/moe_decode.txt" $rc_dec 60 moe_cuda_bench --tokens=4,6,8,10,12,16,24,32 --variants=default \
    --projections=gate/up,down,layer
  grep -E '^==|^\| [0-9]' "$OUT/moe_decode.txt" | grep -E '^==|gate/up \|' | cut -c1-150
  echo "moe decode done $(el)"
  # Each decode kernel's own duration at T = 8 (ncu replays one graph node
  # at a time): routing, the streaming GEMMs, the weighted sum; skipped when
  # the call is past 400 s (four ncu runs take a minute or more).
  [ $(( $(date +%s) - t0 )) -lt 400 ] && for build in base bin; do
    d=$BASE
    [ $build = bin ] && d=$B
    for proj in gate/up layer; do
      echo "$build $proj: $(timeout 60 ncu --kernel-name 'regex:MoeRoute|StreamGemm|MoeWeighted' --launch-count 4 \
        --metrics gpu__time_duration.sum "$d/moe_cuda_bench" --tokens=8 --projections=$proj --variants=default 2>&1 |
        grep -E '^  [A-Za-z].*\(|duration' | sed -E 's/^ +//; s/[(<].*//; s/gpu__time_duration.sum +//' |
        paste -sd' ')"
    done
  done | tee "$OUT/moe_decode_ncu.txt"
fi

# ClockProbe NAME CMD...: CMD's table, and the SM clock, power, temperature
# and clock-event reasons nvidia-smi samples every 20 ms while it runs,
# summarized over the busy samples (power over 200 W).
# Drivers before 535 name the reasons field clocks_throttle_reasons.
reasons_field=clocks_event_reasons.active
nvidia-smi --query-gpu=$reasons_field --format=csv >/dev/null 2>&1 || reasons_field=clocks_throttle_reasons.active
ClockProbe() {
  local name=$1
  shift
  nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu,$reasons_field \
    --format=csv,noheader,nounits -lms 20 >"$OUT/clk_$name.csv" 2>&1 &
  local pid=$!
  timeout 60 "$@" >"$OUT/probe_$name.txt" 2>&1
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  local perf
  perf=$(grep -E '^\| ' "$OUT/probe_$name.txt" | grep -vE '^\| (-|kernel|\(B, H)' | awk -F'|' '{print $(NF-1)}' |
    tr -d ' ' | paste -sd/)
  LD_LIBRARY_PATH='' python3 - "$OUT/clk_$name.csv" "$name" "$perf" <<'PY'
import collections, statistics, sys
rows = []
for line in open(sys.argv[1]):
    f = [x.strip() for x in line.split(",")]
    try:
        rows.append((float(f[0]), float(f[1]), float(f[2]), f[3]))
    except (ValueError, IndexError):
        pass
busy = [r for r in rows if r[1] > 200]
if not busy:
    print(f"{sys.argv[2]}: TFLOP/s {sys.argv[3]}; no busy sample of {len(rows)}")
else:
    reasons = collections.Counter(r[3] for r in busy).most_common(2)
    print(f"{sys.argv[2]}: TFLOP/s {sys.argv[3]}; {len(busy)} busy samples: SM clock median "
          f"{statistics.median(r[0] for r in busy):.0f} MHz (min {min(r[0] for r in busy):.0f}), power mean "
          f"{statistics.mean(r[1] for r in busy):.0f} W, max temp {max(r[2] for r in busy):.0f} C, reasons {reasons}")
PY
}

# 6. Clocks under our kernel and cuDNN's, one after the other, at (1,16,32768)
# non-causal, where our ratio moves most between calls.
if [ "$RUN_CLOCKS" = 1 ]; then
  shape=1:16:32768
  tag=${shape//:/x}
  {
    ClockProbe "ours_$tag" "$BASE/attention_cuda_bench" --dims=128 --only=wgmma_ws --shapes="$shape" --causal=no \
      --iters=80
    ClockProbe "cudnn_$tag" env PYTHONUNBUFFERED=1 LD_LIBRARY_PATH='' python3 bench/peers.py --dims 128 \
      --shapes "$shape" --causal no --backends cuDNN --no-mla --iters 80
  } | tee "$OUT/clocks.txt"
  echo "clocks done $(el)"
  # One launch of each under ncu at its own clock: L2 and tensor-pipe load, the clock it ran at.
  m=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,lts__t_sector_hit_rate.pct
  m+=,lts__t_sectors.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum.per_second
  m+=,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active
  m+=,dram__throughput.avg.pct_of_peak_sustained_elapsed
  if [ $(( $(date +%s) - t0 )) -lt 500 ]; then
    timeout 40 ncu --clock-control none --kernel-name regex:FlashFwdWsKernel --launch-skip 1 --launch-count 1 \
      --metrics "$m" "$BASE/attention_cuda_bench" --dims=128 --only=wgmma_ws --shapes="$shape" --causal=no \
      --iters=2 --warmup=1 2>&1 | grep -vE '^\|' >"$OUT/ncu_ours_$tag.txt"
    PYTHONUNBUFFERED=1 LD_LIBRARY_PATH='' timeout 60 ncu --clock-control none \
      --kernel-name 'regex:sdpa|fmha|flash|attn|cudnn' --launch-skip 2 --launch-count 1 --metrics "$m" \
      python3 bench/peers.py --dims 128 --shapes "$shape" --causal no --backends cuDNN --no-mla --iters 2 \
      --warmup 1 2>&1 | grep -vE '^\|' >"$OUT/ncu_cudnn_$tag.txt"
  fi
  for f in "$OUT"/ncu_ours_* "$OUT"/ncu_cudnn_*; do
    [ -f "$f" ] || continue
    echo "$(basename "$f"): $(grep -E 'duration|per_second|hit_rate|pct_of_peak' "$f" | awk '{print $1"="$NF}' |
      tr '\n' ' ')"
  done | tee -a "$OUT/clocks.txt"
  echo "ncu done $(el)"
fi

# 7. The rest of moe_cuda_test, if the call has time left.
if [ "$RUN_MOE" = 1 ] && [ "$rc_moe" != 124 ] && [ "$rc_moe" != 137 ] && [ $(( $(date +%s) - t0 )) -lt 460 ]; then
  timeout 100 "$B/moe_cuda_test" --gtest_filter="-$moe_new" >"$OUT/moe_tests_rest.log" 2>&1
  rc_moe_rest=$?
fi
echo "moe rest rc=$rc_moe_rest $(el)"

# 8. Where the patched down's time goes, if there is time left (tensor pipe, issue, stores, DRAM).
if [ "$rc_moe" = 0 ] && [ $(( $(date +%s) - t0 )) -lt 520 ]; then
  m=gpu__time_duration.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active
  m+=,smsp__issue_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed
  m+=,l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio
  timeout 45 ncu --clock-control none --kernel-name regex:WgmmaRs --launch-count 1 --launch-skip 1 --metrics "$m" \
    "$B/moe_cuda_bench" --tokens=8192 --projections=down --variants=default 2>&1 | grep -vE '^\|' >"$OUT/ncu.txt"
fi
echo "ncu done $(el)"

echo "==== summary ===="
echo "moe new tests rc=$rc_moe, rest rc=$rc_moe_rest, decode rc=$rc_dec; attention_cuda_test rc=$rc_attn;" \
  "fp8_attention_cuda_test rc=$rc_fp8"
cat "$OUT"/moe_tests_*.log "$OUT/attn_tests.log" "$OUT/fp8_tests.log" 2>/dev/null | grep -E "^\[  (PASSED|FAILED) |Failure" | head -20
grep -E '^==|^\| (8|32) ' "$OUT/moe_decode.txt" | grep -E '^==|gate/up|down' | cut -c1-150
grep -E "gmma|issue_active|dram|op_st|stalled|time_duration" "$OUT/ncu.txt" 2>/dev/null | head -12
cat "$OUT/clocks.txt" "$OUT/moe_decode_ncu.txt" 2>/dev/null
grep -E '^\| .*(ours|cuDNN)|^ours' "$OUT/peers.txt" 2>/dev/null
