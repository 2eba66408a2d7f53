#!/bin/bash
# Runs tests/ops_npy_check.py (kernelctl fp8-attention, mla-decode with pools,
# moe vs float64 NumPy) with Debian's /usr/bin/python3 (the one with numpy);
# skips with a message when it is missing.
set -u
PY=/usr/bin/python3
if [[ ! -x "$PY" ]] || ! "$PY" -c "import numpy" 2>/dev/null; then
  echo "SKIPPED: $PY with numpy is not installed (apt-get install python3-numpy)"
  exit 0
fi
R="${TEST_SRCDIR}/kernelserve"
exec "$PY" "$R/tests/ops_npy_check.py" --kernelctl="$R/client/kernelctl" --kernelserve="$R/server/kernelserve"
