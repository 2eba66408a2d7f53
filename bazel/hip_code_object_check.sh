#!/usr/bin/env bash
# Reads what the AMD device compiler wrote (bazel/hip.bzl's <name>_<arch>.s and
# .hsaco): each code object is for its architecture, holds the kernels named,
# and no kernel uses scratch memory (private segment 0: nothing spilled); the
# listings contain the instructions named.
#   hip_code_object_check.sh TOOLS_DIR [--kernel=NAME]... [--insn=REGEX]... FILE...
set -uo pipefail
tools=$1
shift
kernels=()
insns=()
files=()
while (($#)); do
  case "$1" in
    --kernel=*) kernels+=("${1#--kernel=}"); shift ;;
    --insn=*) insns+=("${1#--insn=}"); shift ;;
    *) files+=("$1"); shift ;;
  esac
done
fail=0
n=0
for f in "${files[@]}"; do
  arch=$(basename "$f" | sed -E 's/.*_(gfx[0-9a-f]+)\.(s|hsaco)$/\1/')
  case "$f" in
    *.s)
      for re in ${insns[@]+"${insns[@]}"}; do
        grep -Eq "$re" "$f" || { echo "FAIL $f: no instruction matching $re"; fail=1; }
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
      echo "$f: $(grep -c '\.private_segment_fixed_size' <<<"$notes") kernels, VGPRs $(grep -Eo '\.vgpr_count: *[0-9]+' <<<"$notes" | grep -Eo '[0-9]+' | sort -n | tail -1) at most" ;;
  esac
  n=$((n + 1))
done
[ "$n" -gt 0 ] || { echo "FAIL: nothing to check"; exit 1; }
exit $fail
