# shellcheck shell=bash disable=SC2034  # sets variables the sourcing test reads
# Shared setup of the container tests (container_smoke_test.sh,
# container_rocm_test.sh, container_user_kernel_test.sh), sourced, not run.
# Each test calls these in its own order, so that it can skip for its own
# reasons (a missing package) before any binary is looked for.
#
# Sets: root (the runfiles root under bazel test, else the workspace).
# The functions set bins, kernelctl, work, tag and name.

skip() { echo "SKIP: $*"; exit 0; }
fail() { echo "FAIL: $*"; [ -n "${name:-}" ] && podman logs "$name" 2>&1 | tail -20; exit 1; }

if [ -n "${TEST_SRCDIR:-}" ]; then
  root="$TEST_SRCDIR/${TEST_WORKSPACE:-kernelserve}"
else
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
fi

require_podman() {
  command -v podman >/dev/null 2>&1 || skip "podman is not installed (apt-get install podman runc; see deploy/README.md)"
}

# find_binaries PATH...: the built binaries, workspace-relative (server/kernelserve),
# from the runfiles or, run by hand, from bazel-bin; bins in that order and
# kernelctl the one named client/kernelctl. Fails where one is missing.
find_binaries() {
  local p b
  bins=()
  for p in "$@"; do
    if [ -n "${TEST_SRCDIR:-}" ]; then b="$root/$p"; else b="$root/bazel-bin/$p"; fi
    [ -x "$b" ] || fail "missing binary $b (bazel build it first)"
    bins+=("$b")
    [ "$p" = client/kernelctl ] && kernelctl="$b"
  done
}

# Podman with the repository's containers.conf (no network for builds);
# skips where podman cannot run here (e.g. no user namespaces).
require_usable_podman() {
  export CONTAINERS_CONF="${CONTAINERS_CONF:-$root/deploy/podman/containers.conf}"
  podman info >/dev/null 2>&1 || skip "podman is installed but not usable here: $(podman info 2>&1 | tail -1)"
}

# start_scratch PREFIX: a work dir, an image tag and a container name of this
# process; all removed on exit, with the volume named in $volume if set.
start_scratch() {
  work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/$1.XXXXXX")
  tag="localhost/$1-test:$$"
  name="$1-$$"
  trap cleanup_scratch EXIT
}
cleanup_scratch() {
  podman rm -f "$name" >/dev/null 2>&1
  [ -n "${volume:-}" ] && podman volume rm -f "$volume" >/dev/null 2>&1
  podman rmi -f "$tag" >/dev/null 2>&1
  rm -rf "$work"
}

# build_image CONTAINERFILE [MAKE_BUNDLE_FLAGS...]: bundles bins with
# deploy/make_bundle.sh into $work/ctx and builds $tag from it, offline
# (both Containerfiles default to FROM scratch); the image must run as uid 10001.
build_image() {
  local containerfile="$1"
  shift
  mkdir -p "$work/ctx"
  bash "$root/deploy/make_bundle.sh" "$@" "$work/ctx/bundle" "${bins[@]}" >/dev/null || fail "make_bundle.sh $*"
  cp "$root/deploy/$containerfile" "$work/ctx/Containerfile"
  podman build -q -t "$tag" -f "$work/ctx/Containerfile" "$work/ctx" >/dev/null ||
    fail "podman build of $containerfile"
  local user
  user=$(podman image inspect --format '{{.Config.User}}' "$tag")
  [ "$user" = "10001:10001" ] || fail "image user is '$user', want 10001:10001"
}

# published_port VAR CONTAINER_PORT: sets VAR to the loopback port podman
# picked for the container's port.
published_port() {
  local _published  # not the caller's variable name, which printf -v sets
  _published=$(podman port "$name" "$2/tcp" | head -1 | sed 's/.*://')
  [ -n "$_published" ] || fail "port $2 is not published"
  printf -v "$1" '%s' "$_published"
}

# wait_serving KERNELCTL_COMMAND...: up to 20 s for health to answer SERVING.
wait_serving() {
  local _
  for _ in $(seq 1 80); do
    [ "$("$@" health 2>/dev/null)" = "SERVING" ] && return 0
    sleep 0.25
  done
  fail "the server never answered SERVING ($*)"
}

# stop_expect_exit_0: SIGTERM drains the server and it exits 0.
stop_expect_exit_0() {
  podman stop -t 30 "$name" >/dev/null || fail "podman stop"
  local code
  code=$(podman inspect --format '{{.State.ExitCode}}' "$name")
  [ "$code" = "0" ] || fail "exit code $code after SIGTERM"
}
