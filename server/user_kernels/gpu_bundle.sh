#!/usr/bin/env bash
# Builds the cuda user-kernel test and its worker here and collects them, the
# CUDA examples and the non-glibc shared libraries they load into
# .bundle/user_kernels/ (git-ignored), laid out as the test's runfiles, for
# the GPU machine (which has nvcc but no Bazel):
#   server/user_kernels/gpu_bundle.sh
#   carry .bundle/user_kernels, then there:
#   cd .bundle/user_kernels && PATH=/usr/local/cuda/bin:$PATH LD_LIBRARY_PATH=$PWD/lib ./user_kernel_cuda_test
set -euo pipefail
cd "$(dirname "$0")/../.."
bazel build //server/user_kernels:user_kernel_cuda_test //server/user_kernels:kernel_worker_cuda
D=.bundle/user_kernels
rm -rf "$D"
mkdir -p "$D/lib" "$D/server/user_kernels" "$D/kernels/api/examples/cuda"
bazel build //kernels/api/examples:cuda_device_code
cp -L bazel-bin/server/user_kernels/user_kernel_cuda_test "$D/"
cp -L bazel-bin/server/user_kernels/kernel_worker_cuda "$D/server/user_kernels/"
cp kernels/api/examples/cuda/*.cu "$D/kernels/api/examples/cuda/"
cp bazel-bin/kernels/api/examples/cuda_*.cubin bazel-bin/kernels/api/examples/cuda_*.ptx "$D/kernels/api/examples/"
cp kernels/api/user_kernel_abi.h kernels/api/user_kernel_util.h "$D/kernels/api/"
source bench/tools/bundle_util.sh
for b in "$D/user_kernel_cuda_test" "$D/server/user_kernels/kernel_worker_cuda"; do CopyBundleLibs "$b" "$D/lib"; done
du -sh "$D"
