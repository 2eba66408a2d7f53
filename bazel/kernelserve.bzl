"""Project macros: compile flags live here and nowhere else."""

KS_COPTS = [
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
    "-Wno-missing-field-initializers",
]

def ks_cc_library(name, copts = [], **kwargs):
    native.cc_library(name = name, copts = KS_COPTS + copts, **kwargs)

def ks_cc_binary(name, copts = [], **kwargs):
    native.cc_binary(name = name, copts = KS_COPTS + copts, **kwargs)

def ks_cc_test(name, copts = [], deps = [], **kwargs):
    native.cc_test(
        name = name,
        copts = KS_COPTS + copts,
        deps = deps + ["//bazel/deps:gtest_main"],
        **kwargs
    )

def ks_proto_library(name, srcs, grpc = True, deps = []):
    """Generates C++ (and gRPC) code with Debian's protoc and wraps it in a cc_library."""
    outs = []
    for src in srcs:
        base = src[:-len(".proto")]
        outs += [base + ".pb.h", base + ".pb.cc"]
        if grpc:
            outs += [base + ".grpc.pb.h", base + ".grpc.pb.cc"]
    pkg = native.package_name()
    # Imports resolve from the package directory, so "kernelserve/v1/x.proto"
    # is both the import path and the generated header's include path.
    cmd = "protoc -I%s --cpp_out=$(GENDIR)/%s" % (pkg, pkg)
    if grpc:
        cmd += " --grpc_out=$(GENDIR)/%s --plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin" % pkg
    cmd += " " + " ".join([pkg + "/" + s for s in srcs])
    native.genrule(
        name = name + "_gen",
        srcs = srcs,
        outs = outs,
        cmd = cmd,
    )
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        includes = ["."],
        deps = deps + ["//bazel/deps:grpc"],
        copts = ["-w"],
    )
