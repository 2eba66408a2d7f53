#!/usr/bin/env bash
# Collects the kernelserve runtime bundle for a FROM scratch image:
#   opt/kernelserve/bin/   kernelserve, kernelctl, token_tool
#   opt/kernelserve/lib/   their non-glibc shared libraries (from ldd)
#   lib/x86_64-linux-gnu/  glibc's libraries, lib64/ the loader
#   etc/                   passwd/group with the numeric service user, hosts, nsswitch,
#                          a default kernelserve.conf
# and next to it, OUT_DIR/../datadir/kernelserve/: the data dir (a volume at run
# time), copied into the image owned by the service user.
# The GPU driver's libraries (libcuda.so.1, ...) are NOT bundled: the NVIDIA
# container toolkit (CDI or --gpus) mounts the host's at run time; the CUDA
# runtime itself is linked statically into kernelserve.
#
#   deploy/make_bundle.sh OUT_DIR BIN...     (OUT_DIR is usually CONTEXT/bundle)
set -euo pipefail
out=${1:?usage: make_bundle.sh OUT_DIR BINARY...}
shift
[ $# -gt 0 ] || { echo "make_bundle.sh: no binaries" >&2; exit 2; }
uid=${KERNELSERVE_UID:-10001}

datadir="$(dirname "$out")/datadir"
rm -rf "$out" "$datadir"
mkdir -p "$out"/opt/kernelserve/bin "$out"/opt/kernelserve/lib "$out"/lib/x86_64-linux-gnu \
  "$out"/lib64 "$out"/etc/kernelserve "$out"/var/lib "$out"/tmp "$datadir"/kernelserve

# glibc's own libraries go where its loader looks by default; everything else
# into the bundle's lib dir (LD_LIBRARY_PATH in the image).
is_glibc() {
  case "$1" in
    ld-linux*.so.*|libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|libresolv.so.*|\
    libutil.so.*|libanl.so.*|libnss_*.so.*|libmvec.so.*) return 0 ;;
  esac
  return 1
}

for bin in "$@"; do
  [ -x "$bin" ] || { echo "make_bundle.sh: $bin is not an executable" >&2; exit 1; }
  install -m 0755 "$bin" "$out/opt/kernelserve/bin/$(basename "$bin")"
  # "name => /path (addr)" and "/lib64/ld-linux-x86-64.so.2 (addr)"
  ldd "$bin" | awk '/=>/ { if ($3 ~ /^\//) print $3; next } /^\t\// { print $1 }' | while read -r lib; do
    name=$(basename "$lib")
    if [[ "$name" == ld-linux* ]]; then
      cp -L "$lib" "$out/lib64/$name"
      cp -L "$lib" "$out/lib/x86_64-linux-gnu/$name"
    elif is_glibc "$name"; then
      cp -L "$lib" "$out/lib/x86_64-linux-gnu/$name"
    else
      cp -L "$lib" "$out/opt/kernelserve/lib/$name"
    fi
  done
done

cat > "$out/etc/passwd" <<PW
root:x:0:0:root:/:/sbin/nologin
kernelserve:x:${uid}:${uid}:kernelserve:/var/lib/kernelserve:/sbin/nologin
PW
cat > "$out/etc/group" <<GR
root:x:0:
kernelserve:x:${uid}:
GR
printf '127.0.0.1 localhost\n::1 localhost ip6-localhost\n' > "$out/etc/hosts"
printf 'passwd: files\ngroup: files\nhosts: files dns\n' > "$out/etc/nsswitch.conf"
cp "$(dirname "$0")/kernelserve.conf" "$out/etc/kernelserve/kernelserve.conf"
chmod 1777 "$out/tmp"
echo "bundle: $(du -sh "$out" | cut -f1) in $out ($(ls "$out/opt/kernelserve/lib" | wc -l) libraries)"
