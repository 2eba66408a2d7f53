#!/usr/bin/env bash
# Builds kernelserve and kernelctl with bazel, collects the bundle and builds
# the image with podman (offline: FROM scratch, nothing is pulled).
#
#   deploy/build_image.sh [TAG]        default TAG: localhost/kernelserve:latest
#   deploy/build_image.sh --variant=rocm [--base=IMAGE] [TAG]
#                                      default TAG: localhost/kernelserve-rocm:latest
#
# --variant=rocm builds deploy/Containerfile.rocm: FROM scratch with Debian
# 12's HIP runtime and ROCm SMI bundled (offline; needs libamdhip64-5 and
# librocm-smi64-1 installed here), or, with --base=IMAGE (or
# $KERNELSERVE_ROCM_BASE), on that ROCm image (ROCm >= 6 for gfx942), which
# podman pulls unless it is local.
#
# Installs podman and runc from apt when missing (needs root), and uses
# deploy/podman/containers.conf unless CONTAINERS_CONF is already set.
set -euo pipefail
cd "$(dirname "$0")/.."
variant=default
base=${KERNELSERVE_ROCM_BASE:-}
tag=
for a in "$@"; do
  case "$a" in
    --variant=default|--variant=rocm) variant=${a#--variant=} ;;
    --base=*) base=${a#--base=} ;;
    --*) echo "build_image.sh: unknown option $a (--variant=default|rocm, --base=IMAGE)" >&2; exit 2 ;;
    *) tag=$a ;;
  esac
done
if [ -n "$base" ] && [ "$variant" != rocm ]; then
  echo "build_image.sh: --base is for --variant=rocm" >&2
  exit 2
fi
if [ "$variant" = rocm ]; then
  tag=${tag:-localhost/kernelserve-rocm:latest}
else
  tag=${tag:-localhost/kernelserve:latest}
fi

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
bins=(bazel-bin/server/kernelserve bazel-bin/client/kernelctl bazel-bin/server/security/token_tool)
if [ "$variant" = rocm ]; then
  if [ -n "$base" ]; then
    deploy/make_bundle.sh --on-base "$ctx/bundle" "${bins[@]}"
  else
    deploy/make_bundle.sh --rocm "$ctx/bundle" "${bins[@]}"
  fi
  cp deploy/Containerfile.rocm "$ctx/Containerfile"
  podman build --quiet --build-arg "BASE=${base:-scratch}" -t "$tag" -f "$ctx/Containerfile" "$ctx"
else
  deploy/make_bundle.sh "$ctx/bundle" "${bins[@]}"
  cp deploy/Containerfile "$ctx/Containerfile"
  podman build --quiet -t "$tag" -f "$ctx/Containerfile" "$ctx"
fi
podman image inspect --format '{{.Id}} {{.Size}} bytes, user {{.Config.User}}' "$tag"
echo "built $tag"
