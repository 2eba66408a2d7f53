#!/usr/bin/env bash
# On the GPU machine, from the repo root, with .bundle/bench carried
# (bench/suites/make_bundle.sh): starts kernelserve on the CUDA backend, runs a
# suite through kernelctl (the correctness gate against the fp64 oracle, then
# the timing), and prints the markdown table last. Logs and results.json go to
# $OUT (or /tmp/bench_out).
#   bench/suites/run_h200.sh [SUITE.json]
# The GEMM ceilings kernels/api cannot measure are the torch measurements of
# DESIGN §7 (bf16 776, FP8 1394 TFLOP/s); the copy ceiling is measured.
set -uo pipefail
cd "$(dirname "$0")/../.."
B=$PWD/.bundle/bench
export LD_LIBRARY_PATH=$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
OUT=${OUT:-/tmp/bench_out}
mkdir -p "$OUT"
SUITE=${1:-bench/suites/h200_demo.json}
PORT=${PORT:-50551}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
"$B/bin/kernelserve" --listen=127.0.0.1:$PORT --backend=cuda --data_dir="$OUT/data" \
  --bench_gemm_tflops=776 --bench_gemm_fp8_tflops=1394 >"$OUT/server.log" 2>&1 &
PID=$!
for _ in $(seq 150); do grep -q "listening on port" "$OUT/server.log" && break; sleep 0.2; done
K="$B/bin/kernelctl --server=127.0.0.1:$PORT --timeout=900"
$K jobs variants --op=attention
$K bench --suite="$SUITE" --out="$OUT/results.json" >"$OUT/table.md" 2>"$OUT/progress.log"
rc=$?
$K jobs variants --op=attention | grep ceilings
$K export --format=junit --out="$OUT/junit.xml"
kill -TERM $PID
wait $PID
grep -E "result|failed|done|error" "$OUT/progress.log" | tail -40
echo "==== $SUITE (rc=$rc) ===="
cat "$OUT/table.md"
exit $rc
