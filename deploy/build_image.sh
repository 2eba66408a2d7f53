#!/usr/bin/env bash
# Builds kernelserve and kernelctl with bazel, collects the bundle and builds
# the image with podman (offline: FROM scratch, nothing is pulled).
#
#   deploy/build_image.sh [TAG]        default TAG: localhost/kernelserve:latest
#
# Installs podman and runc from apt when missing (needs root), and uses
# deploy/podman/containers.conf unless CONTAINERS_CONF is already set.
set -euo pipefail
cd "$(dirname "$0")/.."
tag=${1:-localhost/kernelserve:latest}

if ! command -v podman >/dev/null || ! command -v runc >/dev/null; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "build_image.sh: podman and runc are needed: apt-get install podman runc (as root)" >&2
    exit 1
  fi
  echo "build_image.sh: installing podman and runc from apt"
  DEBIAN_FRONTEND=noninteractive apt-get install -y podman runc >/dev/null ||
    { apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y podman runc >/dev/null; }
fi
export CONTAINERS_CONF=${CONTAINERS_CONF:-$PWD/deploy/podman/containers.conf}

bazel build //server:kernelserve //client:kernelctl //server/security:token_tool
ctx=.bundle/image
rm -rf "$ctx"
mkdir -p "$ctx"
deploy/make_bundle.sh "$ctx/bundle" bazel-bin/server/kernelserve bazel-bin/client/kernelctl \
  bazel-bin/server/security/token_tool
cp deploy/Containerfile "$ctx/Containerfile"
podman build --quiet -t "$tag" -f "$ctx/Containerfile" "$ctx"
podman image inspect --format '{{.Id}} {{.Size}} bytes, user {{.Config.User}}' "$tag"
echo "built $tag"
