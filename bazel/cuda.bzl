"""CUDA build rule: nvcc through a genrule, objects wrapped in a cc_library.

Bazel 4.2.3 has no CUDA toolchain of its own and nothing may be downloaded, so
each .cu file becomes one object file compiled by the nvcc that
@local_config_cuda found at configure time (bazel/gpu_configure.bzl), for
sm_90a only (one architecture keeps CI compile time down). The ptxas resource
report (registers, spills, shared memory) of each file is kept beside its
object as <name>_<file>.ptxas.txt. The CUDA runtime is linked statically, so a
binary runs on machines with and without a GPU.

Without a toolkit, every target these macros make is incompatible with the
build: `bazel build //...` skips it and `bazel test //...` reports it SKIPPED,
and so is every target that depends on one (Bazel propagates it).
"""

load("@local_config_cuda//:defs.bzl", "CUDA_COMPATIBLE", "NVCC")
load("//bazel:kernelserve.bzl", "ks_cc_binary", "ks_cc_library", "ks_cc_test")

# The static CUDA runtime: its symbols have hidden visibility, so code that
# calls the runtime must be linked into the executable itself, never into a
# shared object: every library that calls CUDA sets linkstatic = 1 (tests link
# dynamically by default).
CUDA_RUNTIME_TARGET = "@local_config_cuda//:cuda_runtime"

# Host code that includes the CUDA runtime headers gets them by this flag, not
# by an `includes` attribute, which would reach every dependent's command line
# (the server's included) and make a build with CUDA and one without share
# nothing above the backend.
CUDA_HOST_COPTS = ["-isystem", "external/local_config_cuda/include"]

def _host_kwargs(copts, kwargs):
    kwargs["copts"] = CUDA_HOST_COPTS + copts
    kwargs["target_compatible_with"] = CUDA_COMPATIBLE
    return kwargs

def ks_cuda_cc_library(name, copts = [], **kwargs):
    """Host C++ that calls the CUDA runtime; linked into the executable (linkstatic)."""
    ks_cc_library(name = name, linkstatic = 1, **_host_kwargs(copts, kwargs))

def ks_cuda_cc_test(name, copts = [], **kwargs):
    """A test that calls the CUDA runtime: static, so the binary carries the runtime.

    Without a GPU its cases skip, saying so; without a toolkit it is SKIPPED.
    """
    ks_cc_test(name = name, linkstatic = True, **_host_kwargs(copts, kwargs))

def ks_cuda_cc_binary(name, copts = [], **kwargs):
    ks_cc_binary(name = name, linkstatic = True, **_host_kwargs(copts, kwargs))

NVCC_FLAGS = [
    "-std=c++17",
    "-O3",
    "-gencode=arch=compute_90a,code=sm_90a",
    "-Xcompiler",
    "-fPIC",
    "-lineinfo",
    "-Xptxas",
    "-v",
    "--expt-relaxed-constexpr",
    "-DNDEBUG",
]

def ks_cuda_library(name, srcs = [], hdrs = [], deps = [], copts = [], data_hdrs = [], **kwargs):
    """One object per .cu file; `hdrs` are exported, `data_hdrs` only seen by nvcc.

    nvcc sees the workspace root and the generated-files root on its include
    path; headers the .cu files include from other packages go in data_hdrs
    (the build runs with the local spawn strategy, so this is for
    dependency tracking only).
    """
    objs = []
    for src in srcs:
        if not src.endswith(".cu"):
            fail("ks_cuda_library srcs must be .cu files: " + src)
        base = src[:-len(".cu")].replace("/", "_")
        obj = name + "_" + base + ".o"
        log = name + "_" + base + ".ptxas.txt"
        native.genrule(
            name = name + "_" + base + "_nvcc",
            srcs = [src] + hdrs + data_hdrs,
            outs = [obj, log],
            cmd = " ".join([NVCC] + NVCC_FLAGS + copts + [
                "-I.",
                "-I$(GENDIR)",
                "-c",
                "$(location %s)" % src,
                "-o",
                "$(location %s)" % obj,
                "> $(location %s) 2>&1 || { cat $(location %s); exit 1; }" % (log, log),
            ]),
            message = "nvcc " + src,
            target_compatible_with = CUDA_COMPATIBLE,
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ([] if CUDA_RUNTIME_TARGET in deps else [CUDA_RUNTIME_TARGET]),
        linkstatic = 1,
        target_compatible_with = CUDA_COMPATIBLE,
        **kwargs
    )
