#!/usr/bin/env bash
# On the GPU machine (after bench/run_gpu.sh unpacked .bundle/): Nsight Compute
# on one launch of each wgmma kernel whose speed is in question (MoE gate/up
# on wgmma_rs, MLA decode's two sm_90a kernels), and the HGMMA count of their SASS. Clocks are left as they
# are (--clock-control none). Full reports are packed as $OUT/ncu.tgz; the
# lines printed are durations, pipe utilizations and stall reasons.
set -uo pipefail
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
dir=/tmp/ncu
mkdir -p "$dir"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
sections=(--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis
          --section WarpStateStats --section SchedulerStats)
profile() {  # name kernel-regex command...
  local name=$1 regex=$2
  shift 2
  timeout ${NCU_TIMEOUT:-60} "$NCU" --clock-control none --kernel-name-base mangled -k "regex:$regex" -c 1 \
    "${sections[@]}" --page raw --csv "$@" >"$dir/$name.csv" 2>"$dir/$name.err"
  echo "-- ncu $name (rc=$?) --"
  python3 - "$dir/$name.csv" <<'EOF'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
head = next((i for i, r in enumerate(rows) if r and r[0] == "ID"), None)
if head is None:
    print("  no profile (see the .err file)"); sys.exit()
if "Metric Name" in rows[head]:  # long format: one metric per row
    h = rows[head]
    ni, ui, vi = h.index("Metric Name"), h.index("Metric Unit"), h.index("Metric Value")
    body = rows[head + 1:]
    names, units, vals = [r[ni] for r in body], [r[ui] for r in body], [r[vi] for r in body]
else:  # wide format: names, units, then one row per kernel
    names, units, vals = rows[head], rows[head + 1], rows[head + 2]
want = ("gpu__time_duration.sum", "sm__throughput.avg.pct", "sm__inst_executed_pipe_tensor",
        "sm__pipe_tensor", "l1tex__data_pipe_lsu_wavefronts_mem_shared", "l1tex__data_bank_conflicts",
        "smsp__issue_active.avg.pct", "dram__throughput.avg.pct", "lts__throughput.avg.pct",
        "smsp__average_warps_issue_stalled_", "smsp__warps_active.avg.per_cycle_active")
out = []
for n, u, v in zip(names, units, vals):
    if any(n.startswith(w) for w in want):
        if n.startswith("smsp__average_warps_issue_stalled_"):
            try:
                if float(v.replace(",", "")) < 0.05: continue
            except ValueError:
                continue
        out.append(f"  {n} = {v} {u}")
print("\n".join(out[:60]))
EOF
}
B=.bundle/bin
profile moe_wgmma_rs 'WgmmaRsGemmKernelILi0E' \
  $B/moe_cuda_bench --tokens=8192 --projections=gate/up --variants=wgmma_rs
profile mla_rega 'MlaDecodeRegAKernel' $B/mla_cuda_bench --shapes=8:65536 --only=wgmma_rega
profile mla_roles 'MlaDecodeRolesKernelILi6E' $B/mla_cuda_bench --shapes=8:65536 --only=wgmma_roles
if command -v cuobjdump >/dev/null; then
  for t in moe_cuda_test mla_decode_cuda_test; do
    cuobjdump --dump-sass "$B/$t" >"$dir/$t.sass" 2>/dev/null
    echo "SASS $t: $(grep -c HGMMA "$dir/$t.sass") HGMMA, $(grep -cE 'LDL|STL' "$dir/$t.sass") LDL/STL"
  done
fi
tar czf "${OUT:-/tmp}/ncu.tgz" -C /tmp ncu
