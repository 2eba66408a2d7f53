# Sourced by the scripts that carry binaries to the GPU machine
# (bench/bundle.sh, bench/unrun/prepare.sh, server/user_kernels/gpu_bundle.sh),
# from the repository root.

# RequireCudaBuild NAME: stops with NAME's message unless this Bazel build
# found a CUDA toolkit (without one the CUDA targets build as skipping stubs).
RequireCudaBuild() {
  bazel query @local_config_cuda//:cuda_runtime >/dev/null 2>&1 || true  # configures the toolchains
  local defs
  defs="$(bazel info output_base)/external/local_config_cuda/defs.bzl"
  if ! grep -q '^CUDA_FOUND = True' "$defs"; then
    echo "$1: this build found no CUDA toolkit ($(grep '^CUDA_REASON' "$defs")); set CUDA_PATH" >&2
    exit 1
  fi
}

# CopyBundleLibs BINARY LIBDIR: copies the shared libraries BINARY loads into
# LIBDIR, except glibc, the dynamic loader and the C++ runtime, which come
# from the GPU machine (Ubuntu 24.04: newer than Debian 12's, hence
# compatible). Run ldd on the binary where Bazel built it: its own shared
# objects resolve through its rpath.
CopyBundleLibs() {
  local skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|librt\.so|libpthread\.so|libstdc\+\+\.so|libgcc_s\.so|libresolv\.so)'
  ldd "$1" | awk '/=> \// {print $1, $3}' | while read -r name lib; do
    if ! [[ "$name" =~ $skip ]]; then cp -Ln "$lib" "$2/" 2>/dev/null || true; fi
  done
}
