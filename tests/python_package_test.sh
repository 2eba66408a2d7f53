#!/bin/bash
# pip-installs client/python (the `kernelserve` package; its stubs generated
# from proto/ by protoc at build time) into a venv over Debian's
# /usr/bin/python3, offline, and runs tests/python_package_check.py with it
# against the real server (with --bazel-stubs: the sources and the Bazel-built
# stubs on PYTHONPATH instead). Skips with a message when a Debian package it
# needs is missing.
set -u
PY=/usr/bin/python3
need="python3-numpy python3-grpcio python3-protobuf python3-matplotlib python3-venv python3-pip python3-setuptools protobuf-compiler protobuf-compiler-grpc openssl"
if [[ ! -x "$PY" ]] || ! "$PY" -c "import numpy, grpc, google.protobuf, matplotlib, setuptools, venv, ensurepip" 2>/dev/null ||
   [[ ! -x /usr/bin/grpc_python_plugin ]] || ! command -v protoc >/dev/null || ! command -v openssl >/dev/null; then
  echo "SKIPPED: needs $PY with numpy, grpcio, protobuf, matplotlib, venv and pip, protoc, grpc_python_plugin and openssl (apt-get install $need)"
  exit 0
fi
R="${TEST_SRCDIR}/kernelserve"
W="${TEST_TMPDIR:-$(mktemp -d)}"
if [[ "${1:-}" == "--bazel-stubs" ]]; then
  # No pip: the package's sources with the stubs //client/python:stubs generated, side by side in the
  # runfiles tree, as a user puts client/python and bazel-bin/client/python on PYTHONPATH.
  shift
  cd "$W" && PYTHONPATH="$R/client/python" exec "$PY" "$R/tests/python_package_check.py" \
    --kernelserve="$R/server/kernelserve" "$@"
fi
mkdir -p "$W/src/client"
cp -rL "$R/client/python" "$W/src/client/python" && cp -rL "$R/proto" "$W/src/proto" || exit 1
"$PY" -m venv --system-site-packages "$W/venv" || exit 1
# --no-index: nothing from PyPI; the dependencies are Debian's.
"$W/venv/bin/pip" install -q --no-index --no-build-isolation "$W/src/client/python" || exit 1
cd "$W" && exec "$W/venv/bin/python" "$R/tests/python_package_check.py" --kernelserve="$R/server/kernelserve" \
  --kernelctl="$R/client/kernelctl" --user-kernel="$R/kernels/api/examples/cpu/attention.cc" \
  --readme="$R/client/python/README.md" --source-root="$R" "$@"
