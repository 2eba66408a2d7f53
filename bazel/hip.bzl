"""AMD device code through the clang that @local_config_hip found (bazel/gpu_configure.bzl).

No ROCm is installed here, only Debian's clang-19, lld-19 and HIP headers, so
device code is compiled on its own (--cuda-device-only, -nogpulib: no ROCm
device libraries, so kernels use clang's __builtin_amdgcn_* directly) into
one code object and one assembly listing per architecture. The host side
loads code objects at run time; nothing here links against the HIP runtime.

Without the compiler these targets are incompatible with the build: skipped
by `bazel build //...`, SKIPPED by `bazel test //...`.
"""

load("@local_config_hip//:defs.bzl", "HIP_ARCHS", "HIP_BACKEND_COMPATIBLE", "HIP_CAN_LINK", "HIP_CLANG", "HIP_COMPATIBLE", "HIP_INCLUDE", "HIP_TOOLS_DIR")
load("//bazel:kernelserve.bzl", "ks_cc_library", "ks_cc_test")

HIP_FLAGS = [
    "-x",
    "hip",
    "-std=c++17",
    "-O3",
    "-nogpulib",
    "--cuda-device-only",
    "-DNDEBUG",
    # kernels/gpu/common/vendors/hip.h then defines the device-library entry
    # points HIP's headers call for thread and block ids.
    "-DKS_HIP_NO_DEVICE_LIBS",
]

def _include_flags():
    # /usr/include is on the default path already; naming it again with
    # -isystem moves it ahead of libstdc++'s wrappers and breaks #include_next.
    return [] if HIP_INCLUDE in ["", "/usr/include"] else ["-isystem", HIP_INCLUDE]

def ks_hip_device_code(name, src, hdrs = [], archs = None, copts = [], **kwargs):
    """`src` for each arch: <name>_<arch>.s (the listing) and <name>_<arch>.hsaco (the code object).

    archs defaults to every architecture the found compiler can target.
    """
    outs = []
    for arch in (archs if archs != None else HIP_ARCHS):
        asm = "%s_%s.s" % (name, arch)
        obj = "%s_%s.hsaco" % (name, arch)
        common = [HIP_CLANG] + HIP_FLAGS + copts + [
            "--offload-arch=" + arch,
            "-I.",
            "-I$(GENDIR)",
        ] + _include_flags() + [
            "$(location %s)" % src,
        ]
        cmds = [" ".join(common + ["-S", "-o", "$(location %s)" % asm])]
        if HIP_CAN_LINK:
            cmds.append(" ".join(common + ["--no-gpu-bundle-output", "-c", "-o", "$(location %s)" % obj]))
        else:
            cmds.append("echo 'no ld.lld beside %s: no code object' >&2 && exit 1" % HIP_CLANG)
        native.genrule(
            name = "%s_%s" % (name, arch),
            srcs = [src] + hdrs,
            outs = [asm, obj],
            cmd = " && ".join(cmds),
            message = "clang --offload-arch=%s %s" % (arch, src),
            target_compatible_with = HIP_COMPATIBLE,
        )
        outs += [asm, obj]
    native.filegroup(name = name, srcs = outs, **kwargs)

def ks_hip_embed(name, srcs, archs = ["gfx942"]):
    """<name>.cc: EmbeddedCodeObjects() (kernels/gpu/hip/hip_code_objects.h) over every
    <x>_<arch>.hsaco among `srcs` (ks_hip_device_code targets) for each arch of `archs`, as bytes
    in the binary. A chip is one more entry of `archs` (and its kernels among `srcs`).
    """
    native.genrule(
        name = name,
        srcs = srcs,
        outs = [name + ".cc"],
        cmd = "$(location //bazel:hip_embed.sh) %s %s $@ $(SRCS)" % (HIP_TOOLS_DIR, ",".join(archs)),
        tools = ["//bazel:hip_embed.sh"],
        message = "embedding %s code objects" % ", ".join(archs),
        target_compatible_with = HIP_BACKEND_COMPATIBLE,
    )

def ks_hip_code_object_test(name, code, kernels = [], insns = [], dis = [], max_regs = None, max_lds = None,
                            kernarg_size = None, wave_size = 64, kernel_has = [], kernel_lacks = [],
                            kernel_count = [], target_compatible_with = None):
    """Reads `code` (a ks_hip_device_code target) with hip_code_object_check.sh: the kernels named, no
    scratch, and the limits the kernels' design states (see the script for each option).
    """
    args = [HIP_TOOLS_DIR] + ["--kernel=" + k for k in kernels] + ["--insn=" + i for i in insns]
    args += ["--dis=" + d for d in dis]
    args += ["--kernel-has=" + k for k in kernel_has] + ["--kernel-lacks=" + k for k in kernel_lacks]
    args += ["--kernel-count=" + k for k in kernel_count]
    if max_regs != None:
        args.append("--max-regs=%d" % max_regs)
    if max_lds != None:
        args.append("--max-lds=%d" % max_lds)
    if kernarg_size != None:
        args.append("--kernarg-size=%d" % kernarg_size)
    if wave_size != None:
        args.append("--wave-size=%d" % wave_size)
    native.sh_test(
        name = name,
        size = "small",
        srcs = ["//bazel:hip_code_object_check.sh"],
        args = args + ["$(locations %s)" % code],
        data = [code],
        target_compatible_with = target_compatible_with if target_compatible_with != None else HIP_COMPATIBLE,
    )

def ks_gfx942_kernel(name, src, launch_deps, test_deps, device_hdrs, **check):
    """One gfx942 kernel's package: the host launch and its CPU test, the device code, its check.

    `name` (e.g. "mla_gfx942") names the launch files <name>_launch.{cc,h} and the tests
    <name>_launch_test and <name>_hip_test; the library is :launch (what the HIP backend links)
    and the device code :<src without .hip>_hip (what the HIP backend embeds). gfx942 only,
    whatever else the compiler targets: the kernels use gfx942's MFMA and fp8 formats.
    `check` goes to ks_hip_code_object_test (kernels, insns, dis, max_regs, max_lds, kernarg_size,
    kernel_has, kernel_lacks).
    """
    launch_hdr = name + "_launch.h"
    code = src[:-len(".hip")] + "_hip"
    ks_cc_library(
        name = "launch",
        srcs = [name + "_launch.cc"],
        hdrs = [launch_hdr],
        deps = launch_deps,
    )
    ks_cc_test(
        name = name + "_launch_test",
        size = "small",
        srcs = [name + "_launch_test.cc"],
        deps = [":launch", "//kernels/gpu:launch_test_fixtures"] + test_deps,
    )
    ks_hip_device_code(
        name = code,
        src = src,
        archs = [a for a in HIP_ARCHS if a == "gfx942"],
        hdrs = [launch_hdr, "//kernels/gpu/arch/gfx942:headers"] + device_hdrs,
    )
    ks_hip_code_object_test(
        name = name + "_hip_test",
        code = ":" + code,
        target_compatible_with = HIP_BACKEND_COMPATIBLE,
        **check
    )
