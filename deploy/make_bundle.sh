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
#
#   deploy/make_bundle.sh [--rocm] [--on-base] OUT_DIR BIN...     (OUT_DIR is usually CONTEXT/bundle)
#
# --rocm     also bundles this host's HIP runtime and ROCm SMI (Debian 12's
#            libamdhip64-5, librocm-smi64-1: ROCm 5.2.3) with the libraries they
#            load (ldd, and libamd_comgr.so.2, which HIP opens with dlopen), for
#            deploy/Containerfile.rocm FROM scratch. Unlike NVIDIA's driver
#            libraries, AMD's user-space runtime is not mounted from the host.
# --user-kernels  for users' own kernels (server/user_kernels/README.md):
#            every BIN named kernel_worker* goes to opt/kernelserve/bin/user_kernels/
#            (where the server looks beside itself), and this host's g++ toolchain
#            (Debian's g++, binutils, libstdc++ and libc headers, the libraries
#            they load) is copied in at its own paths, so that the server can
#            build users' C++ kernels in the image. Not with --on-base.
# --on-base  for an image on a base that has its own system (AMD's ROCm images):
#            only opt/kernelserve and etc/kernelserve, without glibc, libstdc++,
#            libgcc_s (the base's, newer, serve both kernelserve and the base's
#            ROCm) and without passwd/group/hosts; ROCm comes from the base.
set -euo pipefail
# ldconfig lives in /usr/sbin on Debian, which a test's PATH (bazel test) lacks.
PATH="$PATH:/usr/sbin:/sbin"
rocm=0
on_base=0
user_kernels=0
while [ $# -gt 0 ]; do
  case "$1" in
    --rocm) rocm=1; shift ;;
    --on-base) on_base=1; shift ;;
    --user-kernels) user_kernels=1; shift ;;
    --*) echo "make_bundle.sh: unknown option $1 (--rocm, --on-base, --user-kernels)" >&2; exit 2 ;;
    *) break ;;
  esac
done
out=${1:?usage: make_bundle.sh [--rocm] [--on-base] OUT_DIR BINARY...}
shift
[ $# -gt 0 ] || { echo "make_bundle.sh: no binaries" >&2; exit 2; }
[ $rocm = 1 ] && [ $on_base = 1 ] &&
  { echo "make_bundle.sh: --rocm bundles Debian's ROCm for FROM scratch; --on-base takes the base's" >&2; exit 2; }
[ $user_kernels = 1 ] && [ $on_base = 1 ] &&
  { echo "make_bundle.sh: --user-kernels bundles a toolchain for FROM scratch; on a base, install g++ there" >&2; exit 2; }
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

# The base's own C++ runtime, on --on-base.
is_base_system() {
  is_glibc "$1" && return 0
  case "$1" in libstdc++.so.*|libgcc_s.so.*) return 0 ;; esac
  return 1
}

# Copies the libraries `ldd $1` names.
bundle_deps() {
  # "name => /path (addr)" and "/lib64/ld-linux-x86-64.so.2 (addr)"
  ldd "$1" | awk '/=>/ { if ($3 ~ /^\//) print $3; next } /^\t\// { print $1 }' | while read -r lib; do
    name=$(basename "$lib")
    if [ $on_base = 1 ] && is_base_system "$name"; then
      continue
    elif [[ "$name" == ld-linux* ]]; then
      cp -L "$lib" "$out/lib64/$name"
      cp -L "$lib" "$out/lib/x86_64-linux-gnu/$name"
    elif is_glibc "$name"; then
      cp -L "$lib" "$out/lib/x86_64-linux-gnu/$name"
    else
      cp -L "$lib" "$out/opt/kernelserve/lib/$name"
    fi
  done
}

for bin in "$@"; do
  [ -x "$bin" ] || { echo "make_bundle.sh: $bin is not an executable" >&2; exit 1; }
  case "$(basename "$bin")" in
    kernel_worker*) dest="$out/opt/kernelserve/bin/user_kernels" ;;
    *) dest="$out/opt/kernelserve/bin" ;;
  esac
  mkdir -p "$dest"
  install -m 0755 "$bin" "$dest/$(basename "$bin")"
  bundle_deps "$bin"
done

# The C++ toolchain users' cpu kernels are built with: the files of
# Debian's packages at their own paths (the compiler runs with PATH and
# LANG only, so it must find its programs, headers and libraries where it
# was installed), without documentation and sanitizer runtimes (the
# allow-list has no -fsanitize), and the shared libraries its programs load.
toolchain_packages=(g++ g++-12 gcc gcc-12 cpp cpp-12 libstdc++-12-dev libgcc-12-dev libc6-dev linux-libc-dev
                    binutils binutils-x86-64-linux-gnu libgomp1 libc6 libcrypt-dev libcrypt1)
bundle_toolchain() {
  command -v dpkg-query >/dev/null || { echo "make_bundle.sh: --user-kernels needs dpkg (a Debian host)" >&2; exit 1; }
  local list="$out.toolchain"
  for p in "${toolchain_packages[@]}"; do
    grep -q "install ok installed" <<<"$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" ||
      { echo "make_bundle.sh: --user-kernels: package $p is not installed (apt-get install g++)" >&2; exit 1; }
    dpkg -L "$p"
  done | grep -v -E '^/usr/share/|san[.]|san_|/[.]$' | sort -u | while read -r f; do
    # Files and symlinks to files only: a directory entry would copy
    # everything below it, and a merged-/usr host's /lib -> usr/lib is the
    # bundle's real lib/ directory.
    if [ -L "$f" ] && [ -d "$f" ]; then continue; fi
    if [ -L "$f" ] || [ -f "$f" ]; then echo "${f#/}"; fi
  done > "$list"
  # tar keeps symlinks as symlinks; a merged-/usr host's /lib/... paths land
  # in the bundle's real lib/ directory, where the loader looks first.
  tar -C / --no-recursion -cf - -T "$list" | tar -C "$out" -xf -
  find "$out/usr/bin" "$out/usr/lib/gcc" -type f -perm -u+x | while read -r exe; do
    { ldd "$exe" 2>/dev/null || true; } | awk '/=> \// { print $3 }' | while read -r lib; do
      [ -e "$out$lib" ] || { mkdir -p "$out$(dirname "$lib")" && cp -L "$lib" "$out$lib"; }
    done
  done
  rm -f "$list"
  # The server finds the compiler on PATH (Containerfile: /usr/bin).
  [ -x "$out/usr/bin/g++" ] || { echo "make_bundle.sh: --user-kernels: no usr/bin/g++ in the bundle" >&2; exit 1; }
}
[ $user_kernels = 1 ] && bundle_toolchain

if [ $rocm = 1 ]; then
  # kernelserve dlopens these by soname (kernels/gpu/hip/hip_runtime.cc,
  # common/rocm_smi.cc); HIP dlopens comgr to read code objects.
  for soname in libamdhip64.so.5 libamd_comgr.so.2 librocm_smi64.so.1; do
    # awk reads to the end: exiting early would kill ldconfig with SIGPIPE,
    # which pipefail turns into a failure.
    lib=$(ldconfig -p | awk -v n="$soname" '$1 == n && /x86-64/ && lib == "" { lib = $NF } END { print lib }')
    [ -n "$lib" ] || { echo "make_bundle.sh: --rocm: $soname is not installed (apt-get install libamdhip64-5 librocm-smi64-1)" >&2; exit 1; }
    cp -L "$lib" "$out/opt/kernelserve/lib/$soname"
    bundle_deps "$lib"
  done
fi

if [ $on_base = 1 ]; then
  rm -rf "$out/lib" "$out/lib64" "$out/tmp" "$out/var"
  cp "$(dirname "$0")/kernelserve.conf" "$out/etc/kernelserve/kernelserve.conf"
  echo "bundle (for a base image): $(du -sh "$out" | cut -f1) in $out ($(ls "$out/opt/kernelserve/lib" | wc -l) libraries)"
  exit 0
fi

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
