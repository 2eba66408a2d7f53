#!/usr/bin/env bash
# Builds kernelserve and kernelctl with bazel, collects the bundle and builds
# the image with podman (offline: FROM scratch, nothing is pulled).
#
#   deploy/build_image.sh [TAG]        default TAG: localhost/kernelserve:latest
#   deploy/build_image.sh --variant=rocm [--base=IMAGE] [TAG]
#                                      default TAG: localhost/kernelserve-rocm:latest
#   deploy/build_image.sh --no-user-kernels [TAG]
#
# The default image runs users' own kernels (server/user_kernels/README.md):
# it carries the kernel worker beside the server (and kernel_worker_cuda
# where this checkout builds CUDA) and this host's Debian g++ toolchain
# (make_bundle.sh --user-kernels, about 250 MB more); --no-user-kernels
# leaves them out, and the server then fails user-kernel jobs naming what is
# missing. nvcc is not bundled: on NVIDIA nodes mount the host's toolkit
# (see deploy/README.md).
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
user_kernels=1
base=${KERNELSERVE_ROCM_BASE:-}
tag=
for a in "$@"; do
  case "$a" in
    --variant=default|--variant=rocm) variant=${a#--variant=} ;;
    --base=*) base=${a#--base=} ;;
    --no-user-kernels) user_kernels=0 ;;
    --*) echo "build_image.sh: unknown option $a (--variant=default|rocm, --base=IMAGE, --no-user-kernels)" >&2; exit 2 ;;
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
  bundle_opts=()
  if [ $user_kernels = 1 ]; then
    bazel build //server/user_kernels:kernel_worker
    bins+=(bazel-bin/server/user_kernels/kernel_worker)
    # Absent (an incompatible target) without a CUDA toolkit.
    if bazel build //server/user_kernels:kernel_worker_cuda 2>/dev/null &&
       [ -x bazel-bin/server/user_kernels/kernel_worker_cuda ]; then
      bins+=(bazel-bin/server/user_kernels/kernel_worker_cuda)
    fi
    bundle_opts=(--user-kernels)
  fi
  deploy/make_bundle.sh "${bundle_opts[@]}" "$ctx/bundle" "${bins[@]}"
  cp deploy/Containerfile "$ctx/Containerfile"
  podman build --quiet -t "$tag" -f "$ctx/Containerfile" "$ctx"
fi
podman image inspect --format '{{.Id}} {{.Size}} bytes, user {{.Config.User}}' "$tag"
echo "built $tag"
