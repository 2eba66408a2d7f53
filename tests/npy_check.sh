#!/bin/bash
# Runs tests/npy_check.py with Debian's /usr/bin/python3 (the one with numpy);
# skips with a message when it is missing.
set -u
PY=/usr/bin/python3
if [[ ! -x "$PY" ]] || ! "$PY" -c "import numpy" 2>/dev/null; then
  echo "SKIPPED: $PY with numpy is not installed (apt-get install python3-numpy)"
  exit 0
fi
R="${TEST_SRCDIR}/kernelserve"
exec "$PY" "$R/tests/npy_check.py" --kernelctl="$R/client/kernelctl" --kernelserve="$R/server/kernelserve"
