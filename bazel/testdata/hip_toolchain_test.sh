#!/usr/bin/env bash
# Reads what the AMD device toolchain wrote for the probe kernel: the MFMA
# instruction in the listing, and in each code object's metadata the target
# architecture, the kernel, and no scratch memory.
#   hip_toolchain_test.sh TOOLS_DIR FILE...   (FILE: <name>_<arch>.s / .hsaco)
set -uo pipefail
tools=$1
shift
fail=0
n=0
for f in "$@"; do
  arch=$(basename "$f" | sed -E 's/.*_(gfx[0-9a-f]+)\.(s|hsaco)$/\1/')
  case "$f" in
    *.s)
      grep -q 'v_mfma_f32_16x16x16_bf16' "$f" || { echo "FAIL $f: no v_mfma_f32_16x16x16_bf16"; fail=1; } ;;
    *.hsaco)
      notes=$("$tools/llvm-readobj" --notes "$f") || { echo "FAIL $f: llvm-readobj cannot read it"; fail=1; continue; }
      grep -q "amdhsa.target: *amdgcn-amd-amdhsa--$arch" <<<"$notes" || { echo "FAIL $f: target is not $arch"; fail=1; }
      grep -q '\.name: *ToolchainProbe$' <<<"$notes" || { echo "FAIL $f: no ToolchainProbe kernel"; fail=1; }
      grep -q '\.private_segment_fixed_size: *0$' <<<"$notes" || { echo "FAIL $f: uses scratch"; fail=1; }
      ;;
  esac
  n=$((n + 1))
  echo "checked $f ($arch)"
done
[ "$n" -gt 0 ] || { echo "FAIL: nothing to check"; exit 1; }
exit $fail
