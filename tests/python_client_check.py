#!/usr/bin/python3
"""A client generated from proto/ in another language (Python) against kernelserve.

Generates Python stubs with Debian's protoc and grpc_python_plugin, starts the
kernelserve binary (CPU backend) on a free port, and checks, over plain gRPC:
grpc.health.v1 answers SERVING; server reflection lists the kernelserve
services; KernelService.Attention on random inputs (GQA, causal, cross lengths,
both layouts) matches attention computed here in float64 NumPy to bf16
accuracy; a malformed request gets INVALID_ARGUMENT naming the field and the
server keeps serving. Exits non-zero on any failure.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np


def bf16_bits(x):
    """float64 -> bf16 bits, round to nearest even (through float32: Gaussian samples hit no double-rounding tie)."""
    b = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return (((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF).astype(np.uint16)


def bits_to_f64(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def attention(q, k, v, causal, layout):
    if layout == "bshd":
        q, k, v = (np.transpose(t, (0, 2, 1, 3)) for t in (q, k, v))
    g = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    s = np.einsum("bhid,bhjd->bhij", q, k) / np.sqrt(q.shape[-1])
    sq, skv = q.shape[2], k.shape[2]
    if causal:
        s = np.where(np.arange(skv)[None, :] <= np.arange(sq)[:, None] + skv - sq, s, -np.inf)
    with np.errstate(invalid="ignore"):
        p = np.exp(s - s.max(-1, keepdims=True))
        o = np.einsum("bhij,bhjd->bhid", p, v) / p.sum(-1, keepdims=True)
    o = np.nan_to_num(o, nan=0.0)
    return np.transpose(o, (0, 2, 1, 3)) if layout == "bshd" else o


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernelserve", required=True)
    ap.add_argument("--proto_dir", required=True)
    args = ap.parse_args()
    work = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
    subprocess.run(["protoc", "-I", args.proto_dir, "--python_out=" + work, "--grpc_out=" + work,
                    "--plugin=protoc-gen-grpc=/usr/bin/grpc_python_plugin"] +
                   [os.path.join(args.proto_dir, "kernelserve/v1", f) for f in
                    ("tensor.proto", "kernel.proto", "device.proto")], check=True)
    sys.path.insert(0, work)
    import grpc
    from kernelserve.v1 import device_pb2, device_pb2_grpc, kernel_pb2, kernel_pb2_grpc, tensor_pb2

    log_path = os.path.join(work, "server.log")
    server = subprocess.Popen([args.kernelserve, "--listen=127.0.0.1:0", "--backend=cpu", "--cpu_threads=2"],
                              stdout=open(log_path, "w"), stderr=subprocess.STDOUT)
    failures = []
    try:
        port = None
        for _ in range(400):
            m = re.search(r"listening on port (\d+)", open(log_path).read())
            if m:
                port = int(m.group(1))
                break
            time.sleep(0.05)
        if port is None:
            sys.exit("kernelserve did not start:\n" + open(log_path).read())
        ch = grpc.insecure_channel("127.0.0.1:%d" % port)
        grpc.channel_ready_future(ch).result(timeout=30)

        # grpc.health.v1: HealthCheckRequest{} -> HealthCheckResponse{status: SERVING (1)}.
        health = ch.unary_unary("/grpc.health.v1.Health/Check", request_serializer=lambda b: b,
                                response_deserializer=lambda b: b)
        resp = health(b"", timeout=10)
        print("health:", "SERVING" if resp == b"\x08\x01" else repr(resp))
        if resp != b"\x08\x01":
            failures.append("health: %r" % resp)

        # Reflection: ServerReflectionRequest{list_services: ""} (field 7).
        refl = ch.stream_stream("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                                request_serializer=lambda b: b, response_deserializer=lambda b: b)
        answer = b"".join(refl(iter([b"\x3a\x00"]), timeout=10))
        for svc in (b"kernelserve.v1.KernelService", b"kernelserve.v1.BufferService",
                    b"kernelserve.v1.DeviceService"):
            if svc not in answer:
                failures.append("reflection does not list %s" % svc.decode())
        print("reflection lists the kernelserve services:", not any("reflection" in f for f in failures))

        devices = device_pb2_grpc.DeviceServiceStub(ch).List(device_pb2.ListDevicesRequest(), timeout=10)
        print("devices:", [(d.backend, d.name) for d in devices.devices])

        stub = kernel_pb2_grpc.KernelServiceStub(ch)
        rng = np.random.default_rng(int.from_bytes(os.urandom(8), "little"))
        cases = [((1, 4, 2, 33, 70, 128), "bhsd", True), ((2, 2, 1, 17, 17, 64), "bshd", False),
                 ((1, 2, 2, 40, 16, 256), "bhsd", True)]
        for (b, hq, hkv, sq, skv, d), layout, causal in cases:
            shp = (lambda h, s: (b, h, s, d)) if layout == "bhsd" else (lambda h, s: (b, s, h, d))
            bits = {n: bf16_bits(rng.standard_normal(shp(h, s)))
                    for n, h, s in (("q", hq, sq), ("k", hkv, skv), ("v", hkv, skv))}
            refs = {n: tensor_pb2.TensorRef(tensor=tensor_pb2.Tensor(dtype=tensor_pb2.BF16, shape=list(x.shape),
                                                                      data=x.astype("<u2").tobytes()))
                    for n, x in bits.items()}
            req = kernel_pb2.AttentionRequest(q=refs["q"], k=refs["k"], v=refs["v"], causal=causal,
                                              layout=kernel_pb2.BHSD if layout == "bhsd" else kernel_pb2.BSHD,
                                              report_error=True)
            out = stub.Attention(req, timeout=60)
            t = out.out.tensor
            o = bits_to_f64(np.frombuffer(t.data, dtype="<u2").reshape(tuple(t.shape)))
            ref = attention(*(bits_to_f64(bits[n]) for n in "qkv"), causal, layout)
            rms = np.sqrt(np.mean(ref * ref))
            rel = np.linalg.norm(o - ref) / np.linalg.norm(ref)
            worst = np.max(np.abs(o - ref) / (2.0 ** -8 * np.maximum(np.abs(ref), rms)))
            ok = t.dtype == tensor_pb2.BF16 and o.shape == ref.shape and rel < 4e-3 and worst <= 2.0
            print("%s attention %s %s causal=%s: rel_rms=%.3g worst=%.1f ulps, server's oracle error %.3g" %
                  ("ok  " if ok else "FAIL", (b, hq, hkv, sq, skv, d), layout, causal, rel, worst,
                   out.error.rel_rms))
            if not ok:
                failures.append("attention %s" % ((b, hq, hkv, sq, skv, d),))

        # A malformed request: k's head dim disagrees with q's.
        q = tensor_pb2.Tensor(dtype=tensor_pb2.BF16, shape=[1, 1, 4, 128], data=bytes(1024))
        k = tensor_pb2.Tensor(dtype=tensor_pb2.BF16, shape=[1, 1, 4, 64], data=bytes(512))
        try:
            stub.Attention(kernel_pb2.AttentionRequest(q=tensor_pb2.TensorRef(tensor=q),
                                                       k=tensor_pb2.TensorRef(tensor=k),
                                                       v=tensor_pb2.TensorRef(tensor=k)), timeout=10)
            failures.append("malformed request was accepted")
        except grpc.RpcError as e:
            good = e.code() == grpc.StatusCode.INVALID_ARGUMENT and "k.shape[3]" in e.details()
            print("%s malformed request: %s: %s" % ("ok  " if good else "FAIL", e.code().name, e.details()))
            if not good:
                failures.append("malformed request: %s %s" % (e.code(), e.details()))
        if resp != health(b"", timeout=10):
            failures.append("server stopped serving after the malformed request")
    finally:
        server.terminate()
        server.wait(timeout=30)
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print("PASSED")


if __name__ == "__main__":
    main()
