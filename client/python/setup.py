"""Builds the kernelserve package; the gRPC stubs are generated from proto/ at build time.

The stubs are not checked in, so they can never be stale: build_py runs Debian's
protoc with grpc_python_plugin (packages protobuf-compiler and
protobuf-compiler-grpc) over the repository's proto/kernelserve/v1/*.proto and
writes them into the built package as kernelserve.v1 (the proto package path,
so the generated `from kernelserve.v1 import ...` lines resolve inside this
package). KERNELSERVE_PROTO_DIR overrides where proto/ is; by default it is
../../proto next to this file (pip builds in the source tree).
"""
import glob
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def find_tool(name, env):
    path = os.environ.get(env) or shutil.which(name) or os.path.join("/usr/bin", name)
    if not os.path.exists(path):
        raise SystemExit("kernelserve: %s not found (set %s, or apt-get install protobuf-compiler "
                         "protobuf-compiler-grpc)" % (name, env))
    return path


class BuildWithStubs(build_py):
    def run(self):
        super().run()
        proto_dir = os.environ.get("KERNELSERVE_PROTO_DIR") or os.path.join(HERE, "..", "..", "proto")
        protos = sorted(glob.glob(os.path.join(proto_dir, "kernelserve", "v1", "*.proto")))
        if not protos:
            raise SystemExit("kernelserve: no kernelserve/v1/*.proto under %s (set KERNELSERVE_PROTO_DIR to "
                             "the repository's proto/ folder)" % os.path.abspath(proto_dir))
        out = os.path.join(self.build_lib)
        os.makedirs(os.path.join(out, "kernelserve", "v1"), exist_ok=True)
        subprocess.run([find_tool("protoc", "PROTOC"), "-I", proto_dir, "--python_out=" + out, "--grpc_out=" + out,
                        "--plugin=protoc-gen-grpc=" + find_tool("grpc_python_plugin", "GRPC_PYTHON_PLUGIN")] + protos,
                       check=True)
        open(os.path.join(out, "kernelserve", "v1", "__init__.py"), "a").close()


setup(cmdclass={"build_py": BuildWithStubs})
