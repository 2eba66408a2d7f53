#!/usr/bin/env python3
"""Submits a benchmark job from Python with stubs generated from proto/ and follows it.

  mkdir -p /tmp/ks_py && protoc -I proto --python_out=/tmp/ks_py --grpc_out=/tmp/ks_py \
      --plugin=protoc-gen-grpc=/usr/bin/grpc_python_plugin proto/kernelserve/v1/*.proto
  PYTHONPATH=/tmp/ks_py /usr/bin/python3 bench/suites/python_client.py 127.0.0.1:50051
"""
import sys

import grpc
from kernelserve.v1 import bench_pb2 as b
from kernelserve.v1 import bench_pb2_grpc as bg


def main():
    target = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:50051"
    stub = bg.BenchServiceStub(grpc.insecure_channel(target))
    spec = b.BenchJobSpec(
        name="python/mla_decode",
        op=b.OP_MLA_DECODE,
        mla=b.MlaDecodeShape(batch=2, q_len=2, heads=8, seq_len=256),
        variants=[],  # the backend's default variant
        method=b.MethodOptions(method=b.METHOD_PASSES, warmup=5, iters=20, passes=3),
    )
    job = stub.Submit(b.SubmitBenchRequest(spec=spec))
    print("submitted", job.id)
    for e in stub.Watch(b.WatchBenchRequest(job_id=job.id)):
        print(f"{e.seq:3d} {b.BenchPhase.Name(e.phase):16s} {e.progress:4.0%} {e.message}")
    job = stub.Get(b.GetBenchRequest(job_id=job.id))
    for r in job.results:
        print(f"{r.variant}: gate {'pass' if r.correct else 'FAIL'} (rel_rms {r.error.rel_rms:.3g}), "
              f"{r.time.value_ms:.4f} ms, {r.tflops:.3g} TFLOP/s, {r.tbps:.3g} TB/s")
    return 0 if job.state == b.JOB_DONE else 1


if __name__ == "__main__":
    sys.exit(main())
