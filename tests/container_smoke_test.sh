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
source "$(dirname "${BASH_SOURCE[0]}")/container_lib.sh" || exit 1

require_podman
command -v openssl >/dev/null 2>&1 || skip "openssl is not installed"
find_binaries server/kernelserve client/kernelctl server/security/token_tool
require_usable_podman
volume="ks-smoke-data-$$"
start_scratch ks-smoke
build_image Containerfile

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
published_port port 50051
published_port mport 9464
[ "$(podman inspect --format '{{.HostConfig.ReadonlyRootfs}}' "$name")" = "true" ] || fail "root fs not read-only"

ctl=("$kernelctl" --server="localhost:$port" --tls-ca="$s/ca.pem" --timeout=10)
wait_serving "${ctl[@]}"

out=$("${ctl[@]}" --token="$token" devices) || fail "kernelctl devices with the token: $out"
grep -q HEALTHY <<<"$out" || fail "no healthy device: $out"
"${ctl[@]}" --token="$token" buffers list >/dev/null || fail "kernelctl buffers list"
err=$("${ctl[@]}" devices 2>&1) && fail "a call without a token succeeded"
grep -q UNAUTHENTICATED <<<"$err" || fail "no token: want UNAUTHENTICATED, got: $err"
err=$("${ctl[@]}" --token=not-the-token devices 2>&1) && fail "a wrong token succeeded"
grep -q UNAUTHENTICATED <<<"$err" || fail "wrong token: want UNAUTHENTICATED, got: $err"
err=$("$kernelctl" --server="127.0.0.1:$port" --timeout=5 --token="$token" devices 2>&1) &&
  fail "plaintext reached the TLS port"

# Metrics over plain HTTP on the second published port.
# shellcheck disable=SC2154  # mport is set by published_port
exec 3<>"/dev/tcp/127.0.0.1/$mport" || fail "metrics port"
printf 'GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n' >&3
metrics=$(cat <&3)
exec 3<&-
grep -q '^kernelserve_grpc_calls_total{service="kernelserve.v1.DeviceService",method="List",code="OK"} 1$' <<<"$metrics" ||
  fail "metrics lack the devices call: $(echo "$metrics" | grep calls_total)"
grep -q 'code="UNAUTHENTICATED"' <<<"$metrics" || fail "metrics lack the refused calls"

# SIGTERM drains and exits 0; the token never reaches the logs.
stop_expect_exit_0
logs=$(podman logs "$name" 2>&1)
grep -q "shut down" <<<"$logs" || fail "no clean shutdown in the logs"
grep -qF "$token" <<<"$logs" && fail "the token appears in the logs"
echo "PASS: image $tag ($(podman image inspect --format '{{.Size}}' "$tag") bytes) served TLS + tokens on" \
  "127.0.0.1:$port as uid 10001 with a read-only root, metrics on :$mport, stopped with exit 0"
