#!/usr/bin/env bash
# Builds every patch in bench/unrun applied together (on a detached worktree
# of HEAD, so this checkout is untouched) and HEAD's own benchmarks as the
# baseline, and packs them with call.sh into .bundle_pack/ (git-ignored), so
# that one device call times them all:
#   bash bench/unrun/prepare.sh
#   then the device tool: command `bash .bundle_pack/call.sh`, carry [".bundle_pack"]
# Device starts are scarce (bench/NOTES.md): one call, most important first.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
source bench/tools/bundle_util.sh
RequireCudaBuild prepare.sh
shopt -s nullglob
patches=(bench/unrun/*.patch)
if [ ${#patches[@]} -eq 0 ]; then
  echo "prepare.sh: no patch in bench/unrun" >&2
  exit 1
fi
wt=${UNRUN_WORKTREE:-/tmp/kernelserve_unrun}
git worktree remove --force "$wt" 2>/dev/null || rm -rf "$wt"
git worktree prune
git worktree add --detach "$wt" HEAD >/dev/null
for p in "${patches[@]}"; do
  git -C "$wt" apply "$root/$p"
  echo "applied $p"
done
new_targets=(//kernels/gpu/moe:moe_cuda_test //bench:moe_cuda_bench //kernels/gpu/attention:attention_cuda_test
             //bench:attention_cuda_bench //kernels/gpu/fp8_attention:fp8_attention_cuda_test
             //bench:fp8_attention_cuda_bench)
base_targets=(//bench:moe_cuda_bench //bench:attention_cuda_bench //bench:fp8_attention_cuda_bench)
(cd "$wt" && bazel build "${new_targets[@]}")
shim=bazel-bin/bench/libks_peer_shim.so  # HEAD's kernels for bench/peers.py --ours, into lib/
bazel build "${base_targets[@]}" //bench:libks_peer_shim.so

stage=$(mktemp -d)
mkdir -p "$stage/bin" "$stage/base" "$stage/lib"
collect() {  # binary, destination folder
  cp -L "$1" "$2/"
  CopyBundleLibs "$1" "$stage/lib"
}
for t in "${new_targets[@]}"; do collect "$wt/bazel-bin/$(echo "${t#//}" | tr ':' '/')" "$stage/bin"; done
for t in "${base_targets[@]}"; do collect "bazel-bin/$(echo "${t#//}" | tr ':' '/')" "$stage/base"; done
collect "$shim" "$stage/lib"
chmod -R u+w "$stage"
strip --strip-unneeded "$stage"/bin/* "$stage"/base/* "$stage"/lib/* 2>/dev/null || true
rm -rf .bundle_pack
mkdir -p .bundle_pack
tar czf .bundle_pack/unrun.tgz -C "$stage" .
cp bench/unrun/call.sh .bundle_pack/
git -C "$wt" diff --stat HEAD >.bundle_pack/patches.txt
git rev-parse HEAD >>.bundle_pack/patches.txt
rm -rf "$stage"
git worktree remove --force "$wt"
du -sh .bundle_pack/*
