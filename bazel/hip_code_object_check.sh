#!/usr/bin/env bash
# Reads what the AMD device compiler wrote (bazel/hip.bzl's <name>_<arch>.s and
# .hsaco): each code object is for its architecture, holds the kernels named,
# and no kernel uses scratch memory (private segment 0: nothing spilled); the
# listings contain the instructions named. A kernel's design states its
# occupancy; the limits below hold the code object to it:
#   --insn=REGEX         a line of the assembly listing (.s) matches
#   --dis=REGEX          a line of the code object's disassembly (llvm-objdump -d) matches
#   --max-regs=N         every kernel's VGPR + AGPR count (the unified file of gfx90a and
#                        later) is at most N
#   --max-lds=N          every kernel's LDS (group segment) is at most N bytes
#   --kernarg-size=N     every kernel's argument segment is exactly N bytes (the host's struct)
#   --wave-size=N        every kernel runs wave N
#   --kernel-has=K:REGEX   a line of kernel K's code in the listing (.s) matches
#   --kernel-lacks=K:REGEX no line of kernel K's code in the listing matches (an
#                        instruction its design says it does without)
#   --kernel-count=K:N:REGEX exactly N lines of kernel K's code in the listing match
#                        (e.g. the one barrier a design states)
#   hip_code_object_check.sh TOOLS_DIR [OPTION]... FILE...
set -uo pipefail
tools=$1
shift
kernels=()
insns=()
dis=()
max_regs=""
max_lds=""
kernarg=""
wave=""
has=()
lacks=()
counts=()
files=()
while (($#)); do
  case "$1" in
    --kernel=*) kernels+=("${1#--kernel=}"); shift ;;
    --insn=*) insns+=("${1#--insn=}"); shift ;;
    --dis=*) dis+=("${1#--dis=}"); shift ;;
    --max-regs=*) max_regs=${1#--max-regs=}; shift ;;
    --max-lds=*) max_lds=${1#--max-lds=}; shift ;;
    --kernarg-size=*) kernarg=${1#--kernarg-size=}; shift ;;
    --wave-size=*) wave=${1#--wave-size=}; shift ;;
    --kernel-has=*) has+=("${1#--kernel-has=}"); shift ;;
    --kernel-lacks=*) lacks+=("${1#--kernel-lacks=}"); shift ;;
    --kernel-count=*) counts+=("${1#--kernel-count=}"); shift ;;
    *) files+=("$1"); shift ;;
  esac
done
fail=0
n=0
# The listing of kernel $1 in file $2: from its label to its s_endpgm.
body() { awk -v k="$1:" '$1 == k {f = 1} f {print} f && /s_endpgm/ {exit}' "$2"; }
# The values of metadata key $1 in $notes, one per kernel.
values() { grep -Eo "\.$1: *[0-9]+" <<<"$notes" | grep -Eo '[0-9]+$'; }
for f in "${files[@]}"; do
  arch=$(basename "$f" | sed -E 's/.*_(gfx[0-9a-f]+)\.(s|hsaco)$/\1/')
  case "$f" in
    *.s)
      for re in ${insns[@]+"${insns[@]}"}; do
        grep -Eq "$re" "$f" || { echo "FAIL $f: no instruction matching $re"; fail=1; }
      done
      for kr in ${has[@]+"${has[@]}"}; do
        k=${kr%%:*}; re=${kr#*:}; code=$(body "$k" "$f")
        [ -n "$code" ] || { echo "FAIL $f: no kernel $k in the listing"; fail=1; continue; }
        grep -Eq "$re" <<<"$code" || { echo "FAIL $f: kernel $k has no instruction matching $re"; fail=1; }
      done
      for kr in ${lacks[@]+"${lacks[@]}"}; do
        k=${kr%%:*}; re=${kr#*:}; code=$(body "$k" "$f")
        [ -n "$code" ] || { echo "FAIL $f: no kernel $k in the listing"; fail=1; continue; }
        if grep -Eq "$re" <<<"$code"; then
          echo "FAIL $f: kernel $k has $(grep -Ec "$re" <<<"$code") instructions matching $re"; fail=1
        fi
      done
      for knr in ${counts[@]+"${counts[@]}"}; do
        k=${knr%%:*}; nr=${knr#*:}; want=${nr%%:*}; re=${nr#*:}; code=$(body "$k" "$f")
        [ -n "$code" ] || { echo "FAIL $f: no kernel $k in the listing"; fail=1; continue; }
        got=$(grep -Ec "$re" <<<"$code")
        [ "$got" = "$want" ] || { echo "FAIL $f: kernel $k has $got instructions matching $re, want $want"; fail=1; }
      done ;;
    *.hsaco)
      notes=$("$tools/llvm-readobj" --notes "$f") || { echo "FAIL $f: llvm-readobj cannot read it"; fail=1; continue; }
      grep -q "amdhsa.target: *amdgcn-amd-amdhsa--$arch" <<<"$notes" || { echo "FAIL $f: target is not $arch"; fail=1; }
      for k in ${kernels[@]+"${kernels[@]}"}; do
        grep -Eq "\.name: *[^ ]*$k" <<<"$notes" || { echo "FAIL $f: no kernel $k"; fail=1; }
      done
      if grep -E '\.private_segment_fixed_size: *[1-9]' <<<"$notes" >/dev/null; then
        echo "FAIL $f: a kernel uses scratch memory"; fail=1
      fi
      if grep -E '\.(vgpr|sgpr)_spill_count: *[1-9]' <<<"$notes" >/dev/null; then
        echo "FAIL $f: a kernel spills registers"; fail=1
      fi
      mapfile -t vg < <(values vgpr_count)
      mapfile -t ag < <(values agpr_count)
      mapfile -t lds < <(values group_segment_fixed_size)
      mapfile -t ka < <(values kernarg_segment_size)
      mapfile -t ws < <(values wavefront_size)
      regs_max=0
      for i in "${!vg[@]}"; do
        # Arch VGPRs are allocated in blocks of 4 before the AGPRs start.
        r=$(( (vg[i] + 3) / 4 * 4 + ${ag[i]:-0} ))
        ((r > regs_max)) && regs_max=$r
        if [ -n "$max_regs" ] && ((r > max_regs)); then
          echo "FAIL $f: kernel $i uses $r VGPR+AGPR (${vg[i]} + ${ag[i]:-0}), more than $max_regs"; fail=1
        fi
      done
      for v in ${lds[@]+"${lds[@]}"}; do
        if [ -n "$max_lds" ] && ((v > max_lds)); then echo "FAIL $f: a kernel uses $v bytes of LDS, more than $max_lds"; fail=1; fi
      done
      for v in ${ka[@]+"${ka[@]}"}; do
        if [ -n "$kernarg" ] && ((v != kernarg)); then echo "FAIL $f: a kernel's arguments are $v bytes, the host passes $kernarg"; fail=1; fi
      done
      for v in ${ws[@]+"${ws[@]}"}; do
        if [ -n "$wave" ] && ((v != wave)); then echo "FAIL $f: a kernel runs wave$v, not wave$wave"; fail=1; fi
      done
      if ((${#dis[@]})); then
        listing=$("$tools/llvm-objdump" -d "$f") || { echo "FAIL $f: llvm-objdump cannot disassemble it"; fail=1; continue; }
        for re in "${dis[@]}"; do
          grep -Eq "$re" <<<"$listing" || { echo "FAIL $f: no instruction matching $re in the disassembly"; fail=1; }
        done
      fi
      echo "$f: $(grep -c '\.private_segment_fixed_size' <<<"$notes") kernels, VGPR+AGPR $regs_max at most, LDS $(printf '%s\n' ${lds[@]+"${lds[@]}"} | sort -n | tail -1) bytes at most" ;;
  esac
  n=$((n + 1))
done
[ "$n" -gt 0 ] || { echo "FAIL: nothing to check"; exit 1; }
exit $fail
