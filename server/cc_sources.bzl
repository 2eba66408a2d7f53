"""The C++ sources of a package under server/, for //server:function_length_test."""

def cc_sources(name = "cc_sources"):
    native.filegroup(
        name = name,
        srcs = native.glob(["*.cc", "*.h"]),
        visibility = ["//server:__pkg__"],
    )
