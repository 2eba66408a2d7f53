#!/usr/bin/env bash
# Session 41, call 2: the stmatrix epilogue (branch s41-stmatrix) against main:
# its moe_cuda_test, moe_cuda_bench alternated twice, torch's grouped GEMM.
set -uo pipefail
D=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/v_out}
mkdir -p /tmp/vb "$OUT" && tar xzf "$D/bundle.tgz" -C /tmp/vb
for f in st_moe_cuda_bench st_moe_cuda_test; do gunzip -c "$D/$f.gz" >/tmp/vb/bin/$f; chmod +x /tmp/vb/bin/$f; done
export LD_LIBRARY_PATH=/tmp/vb/lib
B=/tmp/vb/bin
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/info.txt"
timeout 60 $B/st_moe_cuda_test >"$OUT/st_test.log" 2>&1; st=$?
echo "stmatrix moe_cuda_test rc=$st ok=$(grep -cE '^\[       OK' "$OUT/st_test.log")" | tee "$OUT/tests.txt"
T=--tokens=4096,8192,16384
: >"$OUT/bench.txt"
for r in 1 2; do
  echo "== main round $r" >>"$OUT/bench.txt"; timeout 60 $B/moe_cuda_bench $T --variants=default >>"$OUT/bench.txt" 2>&1
  if [ $st = 0 ]; then echo "== stmatrix round $r" >>"$OUT/bench.txt"; timeout 60 $B/st_moe_cuda_bench $T --variants=default >>"$OUT/bench.txt" 2>&1; fi
done
PYTHONUNBUFFERED=1 LD_LIBRARY_PATH= timeout 60 python3 bench/peers_moe_mla.py --tokens 4096 8192 16384 >"$OUT/peers.txt" 2>&1
timeout 60 $B/moe_cuda_test >"$OUT/moe_cuda_test.log" 2>&1; echo "main moe_cuda_test rc=$? ok=$(grep -cE '^\[       OK' "$OUT/moe_cuda_test.log")" | tee -a "$OUT/tests.txt"
timeout 60 $B/mla_decode_cuda_test >"$OUT/mla.log" 2>&1; echo "main mla_decode_cuda_test rc=$? ok=$(grep -cE '^\[       OK' "$OUT/mla.log")" | tee -a "$OUT/tests.txt"
echo "==== summary $(( $(date +%s) - t0 )) s"; cat "$OUT/tests.txt"; grep -E "Failure|FAILED|Expected|Which is" "$OUT/st_test.log" | head -12
grep -E '^==|^\| [0-9]' "$OUT/bench.txt" | grep -E "==|gate/up \||down \||down\+|layer" | cut -c1-100
grep -E '^\| torch|device copy' "$OUT/peers.txt" 2>/dev/null
