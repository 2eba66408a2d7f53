#!/usr/bin/env bash
# kernelctl across several servers (issue 6): `--server=A,B devices` and
# `jobs list` run on each server in turn under a header; stateful commands
# refuse a list; `drain` and `--undrain`. Two real kernelserve binaries on loopback.
set -uo pipefail
root="${TEST_SRCDIR:-}/${TEST_WORKSPACE:-kernelserve}"
[ -n "${TEST_SRCDIR:-}" ] || root="$(cd "$(dirname "$0")/.." && pwd)/bazel-bin"
server="$root/server/kernelserve"
ctl="$root/client/kernelctl"
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/fleet.XXXXXX")
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$work"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; for l in "$work"/*.log; do tail -3 "$l"; done; exit 1; }

ports=()
for i in 1 2; do
  "$server" --listen=127.0.0.1:0 --backend=cpu --cpu_threads=1 --data_dir="$work/d$i" >"$work/s$i.log" 2>&1 &
  pids+=($!)
done
for i in 1 2; do
  for _ in $(seq 1 100); do
    p=$(grep -o 'listening on port [0-9]*' "$work/s$i.log" | grep -o '[0-9]*$')
    [ -n "$p" ] && break
    sleep 0.1
  done
  [ -n "$p" ] || fail "server $i did not start"
  ports+=("$p")
done
fleet="127.0.0.1:${ports[0]},127.0.0.1:${ports[1]}"

out=$("$ctl" --server="$fleet" devices) || fail "devices across the fleet: $out"
[ "$(echo "$out" | grep -c '^== 127.0.0.1:')" = 2 ] || fail "want two headers: $out"
[ "$(echo "$out" | grep -c HEALTHY)" = 2 ] || fail "want a healthy device per server: $out"
out=$("$ctl" --server="$fleet" jobs list) || fail "jobs list across the fleet: $out"
[ "$(echo "$out" | grep -c '^== 127.0.0.1:')" = 2 ] || fail "want two headers: $out"
out=$("$ctl" --server="$fleet" health) || fail "health across the fleet: $out"
[ "$(echo "$out" | grep -c SERVING)" = 2 ] || fail "want SERVING twice: $out"

# Drain (admin; no tokens here, so the caller is the anonymous admin).
one="127.0.0.1:${ports[0]}"
out=$("$ctl" --server="$one" drain --device=0 --reason=maintenance) || fail "drain: $out"
grep -q "DRAINING (maintenance)" <<<"$out" || fail "drain output: $out"
out=$("$ctl" --server="$fleet" devices) || fail "devices while draining: $out"
grep -q "DRAINING" <<<"$out" || fail "devices does not show DRAINING: $out"
out=$("$ctl" --server="$one" drain --device=0 --undrain) || fail "undrain: $out"
grep -q HEALTHY <<<"$out" || fail "undrain output: $out"

# One server down: the listing goes on and the exit status reports it.
kill "${pids[1]}"; wait "${pids[1]}" 2>/dev/null
out=$("$ctl" --server="$fleet" --timeout=3 devices 2>&1); rc=$?
[ $rc = 1 ] || fail "want exit 1 with a server down, got $rc: $out"
grep -q HEALTHY <<<"$out" || fail "the live server was not listed: $out"

# Stateful commands take one server.
out=$("$ctl" --server="$fleet" buffers list 2>&1); rc=$?
[ $rc = 2 ] || fail "buffers with a list of servers: want exit 2, got $rc"
echo "PASS"
