#!/bin/bash
# Runs deploy/manifests_check.py offline; skips with a message when python3
# or its yaml module (Debian's python3-yaml) is missing.
set -u
PY=$(command -v python3 || true)
if [[ -z "$PY" ]] || ! "$PY" -c "import yaml" 2>/dev/null; then
  echo "SKIPPED: python3 with the yaml module is not installed (apt-get install python3-yaml)"
  exit 0
fi
R="${TEST_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/${TEST_SRCDIR:+kernelserve}"
exec "$PY" "$R/deploy/manifests_check.py" "$R"
