#!/usr/bin/env bash
# Fails listing every function in the given server sources that is longer
# than 150 lines; prints the longest three either way.
set -euo pipefail
exec python3 server/function_lengths.py --max 150 --top 3 "$@"
