"""kernelserve: a Python client for the kernelserve service (see README.md).

    import kernelserve as ks
    c = ks.Client("127.0.0.1:50051")
    out = c.attention(q, k, v, causal=True, report_error=True)
"""
# The stubs may live in another kernelserve/ folder on sys.path (Bazel's
# bazel-bin/client/python, next to this source folder): look there too.
__path__ = __import__("pkgutil").extend_path(__path__, __name__)

try:
    from kernelserve.v1 import tensor_pb2 as _probe  # noqa: F401
except ImportError as e:  # the stubs are generated when the package is built
    raise ImportError("kernelserve's gRPC stubs (kernelserve.v1) are missing: install the package with "
                      "`pip install --no-build-isolation ./client/python` (it runs protoc), or build them with "
                      "`bazel build //client/python:stubs` and put bazel-bin/client/python on PYTHONPATH "
                      "too") from e

from kernelserve.client import Buffer, Client, Error, OpResult, Pool  # noqa: E402
from kernelserve.jobs import Job, ProgressBar, user_kernel  # noqa: E402
from kernelserve.report import html_report, plot_job, plot_jobs, records  # noqa: E402
from kernelserve.tensors import (Tensor, bf16_bits, bf16_values, e8m0, fp4, fp8_decode, fp8_encode,  # noqa: E402
                                 round_bf16)

__all__ = ["Buffer", "Client", "Error", "Job", "OpResult", "Pool", "ProgressBar", "Tensor", "bf16_bits",
           "bf16_values", "e8m0", "fp4", "fp8_decode", "fp8_encode", "html_report", "plot_job", "plot_jobs",
           "records", "round_bf16", "user_kernel"]
__version__ = "0.1.0"
