#!/usr/bin/env bash
# Container smoke test (issue 6): builds the FROM scratch image from a bundle
# of the freshly built binaries, runs it the way deploy/compose.yaml does
# (non-root numeric uid, read-only root filesystem, data dir on a volume,
# TLS + bearer tokens from a mounted secrets dir), reaches it with kernelctl
# over loopback, scrapes /metrics, and stops it with SIGTERM expecting exit 0.
#
# Skips (exit 0, with a message) when podman is missing or unusable: CI
# machines need not have it. Run directly or via
#   bazel test //tests:container_smoke_test
set -uo pipefail

skip() { echo "SKIP: $*"; exit 0; }
fail() { echo "FAIL: $*"; [ -n "${name:-}" ] && podman logs "$name" 2>&1 | tail -20; exit 1; }

command -v podman >/dev/null 2>&1 || skip "podman is not installed (apt-get install podman runc; see deploy/README.md)"
command -v openssl >/dev/null 2>&1 || skip "openssl is not installed"

# Inputs: bazel runfiles, or the workspace when run by hand.
if [ -n "${TEST_SRCDIR:-}" ]; then
  root="$TEST_SRCDIR/${TEST_WORKSPACE:-kernelserve}"
  bins=("$root/server/kernelserve" "$root/client/kernelctl" "$root/server/security/token_tool")
else
  root="$(cd "$(dirname "$0")/.." && pwd)"
  bins=("$root/bazel-bin/server/kernelserve" "$root/bazel-bin/client/kernelctl"
        "$root/bazel-bin/server/security/token_tool")
fi
for b in "${bins[@]}"; do [ -x "$b" ] || fail "missing binary $b (bazel build it first)"; done
kernelctl="${bins[1]}"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$root/deploy/podman/containers.conf}"
podman info >/dev/null 2>&1 || skip "podman is installed but not usable here: $(podman info 2>&1 | tail -1)"

work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/ks-smoke.XXXXXX")
tag="localhost/kernelserve-smoke:$$"
name="ks-smoke-$$"
volume="ks-smoke-data-$$"
cleanup() {
  podman rm -f "$name" >/dev/null 2>&1
  podman volume rm -f "$volume" >/dev/null 2>&1
  podman rmi -f "$tag" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT

# Image.
mkdir -p "$work/ctx"
bash "$root/deploy/make_bundle.sh" "$work/ctx/bundle" "${bins[@]}" >/dev/null || fail "make_bundle.sh"
cp "$root/deploy/Containerfile" "$work/ctx/"
podman build -q -t "$tag" -f "$work/ctx/Containerfile" "$work/ctx" >/dev/null || fail "podman build"
user=$(podman image inspect --format '{{.Config.User}}' "$tag")
[ "$user" = "10001:10001" ] || fail "image user is '$user', want 10001:10001"

# Secrets: a CA, a server certificate for localhost/127.0.0.1, one token.
s="$work/secrets"
mkdir -p "$s"
ec="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
(cd "$s" &&
  openssl req -x509 $ec -keyout ca.key -out ca.pem -days 2 -subj /CN=smoke-ca &&
  openssl req $ec -keyout server.key -out server.csr -subj /CN=localhost &&
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' > ext &&
  openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem \
    -days 2 -extfile ext) >/dev/null 2>&1 || fail "openssl"
token=$("${bins[2]}" --tenant=smoke 2>"$s/tokens") || fail "token_tool"
rm -f "$s/ca.key"
chmod 0755 "$s"; chmod 0644 "$s"/*  # readable by the container's uid 10001

# Run as compose.yaml does; ports published on loopback only, picked by podman.
podman volume create "$volume" >/dev/null || fail "volume create"
podman run -d --name "$name" --read-only --cap-drop=ALL --security-opt=no-new-privileges \
  -v "$s:/etc/kernelserve/secrets:ro" -v "$volume:/var/lib/kernelserve" \
  -p 127.0.0.1::50051 -p 127.0.0.1::9464 "$tag" >/dev/null || fail "podman run"
port=$(podman port "$name" 50051/tcp | head -1 | sed 's/.*://')
mport=$(podman port "$name" 9464/tcp | head -1 | sed 's/.*://')
[ -n "$port" ] && [ -n "$mport" ] || fail "no published ports"
[ "$(podman inspect --format '{{.HostConfig.ReadonlyRootfs}}' "$name")" = "true" ] || fail "root fs not read-only"

ctl=("$kernelctl" --server="localhost:$port" --tls-ca="$s/ca.pem" --timeout=10)
ok=0
for _ in $(seq 1 40); do
  if [ "$("${ctl[@]}" health 2>/dev/null)" = "SERVING" ]; then ok=1; break; fi
  sleep 0.25
done
[ $ok = 1 ] || fail "the server never answered SERVING on localhost:$port"

out=$("${ctl[@]}" --token="$token" devices) || fail "kernelctl devices with the token: $out"
echo "$out" | grep -q HEALTHY || fail "no healthy device: $out"
"${ctl[@]}" --token="$token" buffers list >/dev/null || fail "kernelctl buffers list"
err=$("${ctl[@]}" devices 2>&1) && fail "a call without a token succeeded"
echo "$err" | grep -q UNAUTHENTICATED || fail "no token: want UNAUTHENTICATED, got: $err"
err=$("${ctl[@]}" --token=not-the-token devices 2>&1) && fail "a wrong token succeeded"
echo "$err" | grep -q UNAUTHENTICATED || fail "wrong token: want UNAUTHENTICATED, got: $err"
err=$("$kernelctl" --server="127.0.0.1:$port" --timeout=5 --token="$token" devices 2>&1) &&
  fail "plaintext reached the TLS port"

# Metrics over plain HTTP on the second published port.
exec 3<>"/dev/tcp/127.0.0.1/$mport" || fail "metrics port"
printf 'GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n' >&3
metrics=$(cat <&3)
exec 3<&-
echo "$metrics" | grep -q '^kernelserve_grpc_calls_total{service="kernelserve.v1.DeviceService",method="List",code="OK"} 1$' ||
  fail "metrics lack the devices call: $(echo "$metrics" | grep calls_total)"
echo "$metrics" | grep -q 'code="UNAUTHENTICATED"' || fail "metrics lack the refused calls"

# SIGTERM drains and exits 0; the token never reaches the logs.
podman stop -t 30 "$name" >/dev/null || fail "podman stop"
code=$(podman inspect --format '{{.State.ExitCode}}' "$name")
[ "$code" = "0" ] || fail "exit code $code after SIGTERM"
logs=$(podman logs "$name" 2>&1)
echo "$logs" | grep -q "shut down" || fail "no clean shutdown in the logs"
echo "$logs" | grep -qF "$token" && fail "the token appears in the logs"
echo "PASS: image $tag ($(podman image inspect --format '{{.Size}}' "$tag") bytes) served TLS + tokens on" \
  "127.0.0.1:$port as uid 10001 with a read-only root, metrics on :$mport, stopped with exit 0"
