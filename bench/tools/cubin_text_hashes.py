#!/usr/bin/python3
"""Machine-code fingerprint of CUDA sources, for refactors that must not change
what runs: compiles each .cu to a cubin with the build's flags and prints one
line per kernel, "<sha256 of its .text section> <bytes> <file> <symbol>".
Two trees print the same hashes exactly when every kernel's machine code is
the same (names may differ: compare the hash columns). Needs nvcc only.

  bench/tools/cubin_text_hashes.py [-I DIR]... FILE.cu...
"""
import argparse
import hashlib
import os
import shutil
import struct
import subprocess
import sys
import tempfile


def sections(elf):
    """(name, bytes) of every section of a 64-bit little-endian ELF."""
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    heads = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    strtab = heads[shstrndx]
    names = elf[strtab[4]:strtab[4] + strtab[5]]
    for h in heads:
        name = names[h[0]:names.index(b"\0", h[0])].decode()
        data = b"" if h[1] == 8 else elf[h[4]:h[4] + h[5]]  # SHT_NOBITS holds nothing
        yield name, data


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-I", dest="includes", action="append", default=[])
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    nvcc = os.environ.get("NVCC") or shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    with tempfile.TemporaryDirectory() as tmp:
        for src in a.files:
            cubin = os.path.join(tmp, "k.cubin")
            cmd = [nvcc, "-std=c++17", "-O3", "-gencode=arch=compute_90a,code=sm_90a",
                   "--expt-relaxed-constexpr", "-DNDEBUG", "-I" + root,
                   "-I" + os.path.join(root, "bazel-bin")] + ["-I" + i for i in a.includes] + [
                       "-cubin", "-o", cubin, src]
            subprocess.run(cmd, check=True, cwd=root)
            with open(cubin, "rb") as f:
                elf = f.read()
            for name, data in sections(elf):
                if name.startswith(".text."):
                    print(hashlib.sha256(data).hexdigest()[:16], len(data), src, name[len(".text."):])
    return 0


if __name__ == "__main__":
    sys.exit(main())
