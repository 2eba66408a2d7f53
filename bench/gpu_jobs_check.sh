#!/usr/bin/env bash
# On the GPU machine (after bench/run_gpu.sh unpacked .bundle/): benchmark
# jobs through the real server on the cuda backend — the same attention job
# timed by device events (kernel), by CUDA-graph replays (graph) and in a
# sustained window with NVML clocks — printed as kernelctl's markdown tables.
set -uo pipefail
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
data=$(mktemp -d)
.bundle/bin/kernelserve --listen=127.0.0.1:50599 --backend=cuda --data_dir="$data" >"$data/server.log" 2>&1 &
server=$!
trap 'kill -TERM $server; wait $server' EXIT
for _ in $(seq 100); do .bundle/bin/kernelctl --server=127.0.0.1:50599 health >/dev/null 2>&1 && break; sleep 0.1; done
KS=(.bundle/bin/kernelctl --server=127.0.0.1:50599 --timeout=300)
shape=(--op=attention --batch=1 --heads=16 --seq=8192 --head-dim=128 --causal --variants=cuda)
"${KS[@]}" bench "${shape[@]}" --name=attn-kernel --method=kernel --warmup=20 --iters=50
"${KS[@]}" bench "${shape[@]}" --name=attn-graph --method=graph --warmup=20 --iters=50
# Sustained window: SM clock, power and temperature sampled through NVML.
"${KS[@]}" bench "${shape[@]}" --name=attn-sustained --method=sustained --warmin=1 --window=3
# Our kernel next to the fp64 oracle on a shape the oracle can time.
"${KS[@]}" bench --op=attention --batch=1 --heads=8 --heads-kv=2 --seq=1024 --head-dim=128 --causal \
  --variants=cuda,oracle --name=attn-vs-oracle --method=kernel --warmup=2 --iters=5
"${KS[@]}" bench --op=mla_decode --batch=8 --heads=16 --seq=32768 --q-len=4 --variants=cuda \
  --name=mla-graph --method=graph --warmup=20 --iters=100
# The same decode on a paged pool with shuffled slots (page size 1), as a decode server holds it.
"${KS[@]}" bench --op=mla_decode --batch=8 --heads=16 --seq=32768 --q-len=4 --page-size=1 --variants=cuda \
  --name=mla-paged-graph --method=graph --warmup=20 --iters=100
# The variant tables through the server: each entry by name ("cuda.<entry>")
# beside the dispatcher's choice; an entry that does not serve the shape is
# reported failed with its reason, not run.
"${KS[@]}" bench --op=attention --batch=1 --heads=16 --seq=4096 --head-dim=128 --causal \
  --variants=cuda,cuda.wgmma_ws --name=attn-table --method=kernel --warmup=10 --iters=20
"${KS[@]}" bench --op=mla_decode --batch=8 --heads=16 --seq=32768 --q-len=4 \
  --variants=cuda,cuda.wgmma_rega,cuda.wgmma_roles --name=mla-table --method=graph --warmup=20 --iters=100
# The L2 flush before every launch (two buffers of the cache size the backend
# reports), on a shape whose inputs fit in L2: flushed it must be slower.
"${KS[@]}" bench --op=mla_decode --batch=1 --heads=16 --seq=8192 --q-len=4 --variants=cuda \
  --name=mla-small-warm --method=kernel --warmup=20 --iters=100
"${KS[@]}" bench --op=mla_decode --batch=1 --heads=16 --seq=8192 --q-len=4 --variants=cuda --l2-flush \
  --name=mla-small-flushed --method=kernel --warmup=20 --iters=100
# The jobs above exported as JSON and drawn (time per variant, the gate, the
# sustained window's SM clock and power over time); the picture and the JSON
# come back under $OUT when it is set. The clock series must be there.
dest=${OUT:-$data}
"${KS[@]}" export --limit=20 --format=json --out="$dest/gpu_jobs.json" --plot="$dest/gpu_jobs.png" &&
  echo "export: SM clock series in the JSON: $(grep -oE 'sm_clock_mhz_samples|smClockMhzSamples' "$dest/gpu_jobs.json" | wc -l)"
