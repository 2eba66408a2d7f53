"""CUDA build rule: nvcc through a genrule, objects wrapped in a cc_library.

Bazel 4.2.3 has no CUDA toolchain of its own and nothing may be downloaded, so
each .cu file becomes one object file compiled by /usr/local/cuda/bin/nvcc for
sm_90a only (one architecture keeps CI compile time down). The ptxas resource
report (registers, spills, shared memory) of each file is kept beside its
object as <name>_<file>.ptxas.txt. The CUDA runtime is linked statically, so a
binary runs on machines with and without a GPU.
"""

NVCC = "/usr/local/cuda/bin/nvcc"

CUDA_INCLUDE = "/usr/local/cuda/include"

# The static CUDA runtime is //kernels/cuda:cuda_runtime (an import of
# libcudart_static.a). Its symbols have hidden visibility, so code that calls
# the runtime must be linked into the executable itself, never into a shared
# object: every library that calls CUDA sets linkstatic = 1 (tests link
# dynamically by default). Its other link flags:
CUDA_RUNTIME_TARGET = "//kernels/cuda:cuda_runtime"

CUDA_RUNTIME_LINKOPTS = [
    "-ldl",
    "-lrt",
    "-lpthread",
]

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
                "-isystem",
                CUDA_INCLUDE,
                "-c",
                "$(location %s)" % src,
                "-o",
                "$(location %s)" % obj,
                "> $(location %s) 2>&1 || { cat $(location %s); exit 1; }" % (log, log),
            ]),
            message = "nvcc " + src,
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ([] if CUDA_RUNTIME_TARGET in deps else [CUDA_RUNTIME_TARGET]),
        linkstatic = 1,
        **kwargs
    )

# The CUDA runtime API headers that host code (compiled by gcc) includes.
# Bazel refuses include paths outside the execution root, so they are copied
# into the package's generated files and exported from there.
CUDA_RUNTIME_API_HEADERS = [
    "builtin_types.h",
    "crt/host_defines.h",
    "cuda_device_runtime_api.h",
    "cuda_runtime_api.h",
    "device_types.h",
    "driver_types.h",
    "surface_types.h",
    "texture_types.h",
    "vector_types.h",
]

def ks_cuda_runtime(name):
    """cc_library: CUDA runtime API headers (<cuda_runtime_api.h>) + static cudart."""
    outs = ["cuda_include/" + h for h in CUDA_RUNTIME_API_HEADERS]
    native.genrule(
        name = name + "_archive",
        outs = ["cuda_lib/libcudart_static.a"],
        cmd = "cp /usr/local/cuda/lib64/libcudart_static.a $@",
        message = "copying the static CUDA runtime",
    )
    native.cc_import(
        name = name + "_static",
        static_library = "cuda_lib/libcudart_static.a",
    )
    native.genrule(
        name = name + "_headers",
        outs = outs,
        cmd = " && ".join([
            "mkdir -p $$(dirname $(location cuda_include/%s)) && cp %s/%s $(location cuda_include/%s)" %
            (h, CUDA_INCLUDE, h, h)
            for h in CUDA_RUNTIME_API_HEADERS
        ]),
        message = "copying CUDA runtime API headers",
    )
    native.cc_library(
        name = name,
        hdrs = outs,
        includes = ["cuda_include"],
        linkopts = CUDA_RUNTIME_LINKOPTS,
        deps = [":" + name + "_static"],
    )
