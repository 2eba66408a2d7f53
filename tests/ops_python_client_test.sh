#!/bin/bash
# Runs tests/ops_python_client_check.py (Fp8Attention, MlaDecode with pools,
# Moe through a client generated from proto/, vs float64 NumPy) with Debian's
# /usr/bin/python3 (numpy and grpcio); skips with a message when they or
# grpc_python_plugin are missing.
set -u
PY=/usr/bin/python3
if [[ ! -x "$PY" ]] || ! "$PY" -c "import numpy, grpc" 2>/dev/null || [[ ! -x /usr/bin/grpc_python_plugin ]]; then
  echo "SKIPPED: needs $PY with numpy and grpcio, and /usr/bin/grpc_python_plugin (apt-get install python3-numpy python3-grpcio protobuf-compiler-grpc)"
  exit 0
fi
R="${TEST_SRCDIR}/kernelserve"
exec "$PY" "$R/tests/ops_python_client_check.py" --kernelserve="$R/server/kernelserve" --proto_dir="$R/proto"
