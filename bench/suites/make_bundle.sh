#!/usr/bin/env bash
# Builds kernelserve and kernelctl here and collects them, with the non-glibc
# shared libraries they load, into .bundle/bench/ (git-ignored) for a device
# run:  bench/suites/make_bundle.sh  then carry .bundle/bench and run
# bench/suites/run_h200.sh there.
set -euo pipefail
cd "$(dirname "$0")/../.."
bazel build //server:kernelserve //client:kernelctl
D=.bundle/bench
rm -rf "$D"
mkdir -p "$D/bin" "$D/lib"
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|librt\.so|libpthread\.so|libstdc\+\+\.so|libgcc_s\.so|libresolv\.so)'
for b in server/kernelserve client/kernelctl; do
  cp -L "bazel-bin/$b" "$D/bin/"
  ldd "bazel-bin/$b" | awk '/=> \// {print $1, $3}' | while read -r name lib; do
    if ! [[ "$name" =~ $skip ]]; then cp -Ln "$lib" "$D/lib/" 2>/dev/null || true; fi
  done
done
du -sh "$D"
