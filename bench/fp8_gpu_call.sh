#!/usr/bin/env bash
# One device call for the FP8 attention kernels (issue 15), from the root of
# the checkout the device tool sends, with this script, bundle.tgz
# (bench/bundle.sh's .bundle_pack/bundle.tgz) and bench/peers.py copied into
# one carried folder:
#   bash <folder>/fp8_gpu_call.sh
# UNTRIED (a gtest filter, default the determinism test of every entry) runs
# first in its own process under a timeout; if it hangs, the rest times only ws. Then the
# whole fp8 test, the bf16 attention test, SASS counts of the FP8 kernels,
# the bench at issue 15's shapes, torch cuDNN / FA2 peers in the same call,
# and ncu pipe utilisation (XU = MUFU + conversions) at S = 4096. Logs under
# $OUT; a short table last.
set -uo pipefail
D=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/fp8_out}
mkdir -p "$OUT" /tmp/fp8b
tar xzf "$D/bundle.tgz" -C /tmp/fp8b
export LD_LIBRARY_PATH=/tmp/fp8b/lib
B=/tmp/fp8b/bin
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  cat "$D/commit.txt" 2>/dev/null
} >"$OUT/info.txt" 2>&1
cat "$OUT/info.txt"
t0=$(date +%s)
timeout 90 "$B/fp8_attention_cuda_test" --gtest_filter="${UNTRIED:-*RepeatsBitForBit*}" >"$OUT/tests.log" 2>&1
rc_ws=$?
rc_fp8=skipped
if [ $rc_ws -ne 124 ] && [ $rc_ws -ne 137 ]; then
  timeout 150 "$B/fp8_attention_cuda_test" --gtest_filter="-${UNTRIED:-*RepeatsBitForBit*}" >>"$OUT/tests.log" 2>&1
  rc_fp8=$?
fi
timeout 60 "$B/attention_cuda_test" >>"$OUT/tests.log" 2>&1
rc_attn=$?
rc_be=skipped
if [ -x "$B/gpu_backend_test" ]; then
  timeout 60 "$B/gpu_backend_test" >>"$OUT/tests.log" 2>&1
  rc_be=$?
fi
echo "tests done at +$(( $(date +%s) - t0 )) s"

# SASS per FP8 attention kernel: wgmma (QGMMA), local memory, XU conversions and exponentials.
cuobjdump --dump-sass "$B/fp8_attention_cuda_test" 2>/dev/null | awk '
  /Function : / { f = $3; keep = (f ~ /Fp8Attn/) }
  keep && /QGMMA/ { q[f]++ } keep && /(LDL|STL)/ { l[f]++ } keep && /F2I/ { i[f]++ }
  keep && /MUFU.EX2/ { e[f]++ } keep && /USETMAXREG/ { r[f]++ } keep && /[ \t]\/\*[0-9a-f]+\*\// { n[f]++ }
  END { for (f in n) printf "%s QGMMA=%d LDL/STL=%d F2I=%d MUFU.EX2=%d USETMAXREG=%d insts=%d\n", f, q[f], l[f], i[f], e[f], r[f], n[f] }
' | sort >"$OUT/sass.txt"

only=()
[ $rc_ws -eq 124 ] || [ $rc_ws -eq 137 ] && only=(--only=ws)
timeout 120 "$B/fp8_attention_cuda_bench" --issue --modes=lean,exact "${only[@]}" >"$OUT/bench.txt" 2>&1
timeout 45 "$B/fp8_attention_cuda_bench" "${only[@]}" >>"$OUT/bench.txt" 2>&1
timeout 30 "$B/fp8_attention_cuda_bench" --format=e4m3fnuz --modes=lean "${only[@]}" >>"$OUT/bench.txt" 2>&1
echo "bench done at +$(( $(date +%s) - t0 )) s"
PYTHONUNBUFFERED=1 LD_LIBRARY_PATH= timeout 90 python3 "$D/peers.py" >"$OUT/peers.txt" 2>&1
echo "peers done at +$(( $(date +%s) - t0 )) s"

metrics=gpu__time_duration.sum,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active
metrics+=,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active
metrics+=,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active
metrics+=,sm__inst_executed.avg.per_cycle_active,smsp__issue_active.avg.pct_of_peak_sustained_active
: >"$OUT/ncu.txt"
for k in ws; do
  for m in lean; do
    echo "== $k $m (1,16,4096) d128 causal, fp8 inputs" >>"$OUT/ncu.txt"
    timeout 40 ncu --clock-control none --kernel-name regex:Fp8Attn --launch-count 1 --metrics "$metrics" \
      "$B/fp8_attention_cuda_bench" --only=$k --seq=4096 --modes=$m 2>&1 | grep -vE '^\|' >>"$OUT/ncu.txt"
  done
done
# Where the consumers' cycles go: warp stall reasons (long scoreboard, wait,
# barrier, math throttle, ...) of the default kernel.
echo "== ws lean (1,16,4096) d128 causal: WarpStateStats" >>"$OUT/ncu.txt"
stall=regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio
stall+=,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum
stall+=,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__issue_active.avg.pct_of_peak_sustained_active
timeout 60 ncu --clock-control none --kernel-name regex:Fp8Attn --launch-count 1 --metrics "$stall" \
  "$B/fp8_attention_cuda_bench" --only=ws --seq=4096 --modes=lean >"$OUT/ncu_stalls.txt" 2>&1
echo "ncu done at +$(( $(date +%s) - t0 )) s"

echo "==== summary ===="
echo "untried-first tests: rc=$rc_ws; fp8 tests: rc=$rc_fp8; attention tests: rc=$rc_attn; gpu_backend tests: rc=$rc_be"
grep -E "^\[  (PASSED|FAILED) |Failure|^\[  FAILED" "$OUT/tests.log" | head -30
cat "$OUT/sass.txt"
grep -E '^\|' "$OUT/bench.txt" | grep -vE '^\| -+'
grep -E '^\|' "$OUT/peers.txt" | grep -vE '^\| -+'
grep -E "==|xu|gmma|time_duration|issue_active" "$OUT/ncu.txt" | head -60
grep -E "stalled|bank_conflicts|wavefronts|issue_active" "$OUT/ncu_stalls.txt" | grep -vE " 0(\.0+)?$" | sort -k3 -n -r | head -24
