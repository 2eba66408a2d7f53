"""Benchmark jobs: specs from keywords, watching with a progress bar, results as records."""
import sys
import time

from google.protobuf import json_format

from kernelserve import report as _report
from kernelserve.v1 import bench_pb2

_OPS = {"attention": bench_pb2.OP_ATTENTION, "fp8_attention": bench_pb2.OP_FP8_ATTENTION,
        "mla_decode": bench_pb2.OP_MLA_DECODE, "moe_gateup": bench_pb2.OP_MOE_GATEUP,
        "moe_down": bench_pb2.OP_MOE_DOWN, "moe_layer": bench_pb2.OP_MOE_LAYER}
_SHAPE_FIELD = {"attention": "attention", "fp8_attention": "attention", "mla_decode": "mla",
                "moe_gateup": "moe", "moe_down": "moe", "moe_layer": "moe"}
_METHODS = {"kernel": bench_pb2.METHOD_KERNEL, "passes": bench_pb2.METHOD_PASSES,
            "sustained": bench_pb2.METHOD_SUSTAINED, "graph": bench_pb2.METHOD_GRAPH}
_INPUTS = {"gaussian": bench_pb2.INPUT_GAUSSIAN, "long_tail": bench_pb2.INPUT_LONG_TAIL}
_TERMINAL = (bench_pb2.JOB_DONE, bench_pb2.JOB_FAILED, bench_pb2.JOB_CANCELLED, bench_pb2.JOB_INTERRUPTED)


def to_dict(message):
    """A proto message as a dict with the proto's field names and every field present (ints as ints)."""
    d = json_format.MessageToDict(message, preserving_proto_field_name=True, including_default_value_fields=True)
    return _report.normalize(d)


def _key(value, table, what):
    key = str(value).lower().replace("-", "_").replace(".", "_")
    if key not in table:
        raise ValueError("%s must be one of %s, got %r" % (what, ", ".join(table), value))
    return key


def op_enum(op):
    return _OPS[_key(op, _OPS, "op")]


def state_enum(state):
    name = str(state).upper()
    return bench_pb2.BenchJobState.Value(name if name.startswith("JOB_") else "JOB_" + name)


def parse_shape(op, shape, message):
    """Fills the shape field of `message` (a BenchJobSpec or LeaderboardRequest) that op uses from a dict."""
    target = getattr(message, _SHAPE_FIELD[_key(op, _OPS, "op")])
    fields = [f.name for f in target.DESCRIPTOR.fields]
    unknown = sorted(set(shape) - set(fields) - {f.json_name for f in target.DESCRIPTOR.fields})
    if unknown:
        raise ValueError("shape: no field %s in %s's shape (%s); its fields: %s" % (
            ", ".join(map(repr, unknown)), op, target.DESCRIPTOR.name, ", ".join(fields)))
    json_format.ParseDict(shape, target)



def user_kernel(path=None, name=None, backend="", flags=(), source=None, grid=None, block=None, shared_mem=0):
    """One of your kernels for submit(user_kernels=[...]) (kernels/api/user_kernel_abi.h): a C++ (cpu), CUDA
    (.cu) or HIP (.hip) source file, a built .so, a .cubin, a .ptx or an AMD GPU code object (.hsaco), told
    apart as kernelctl submit does; or source= text. grid/block ((x, y, z) or x) and shared_mem (bytes) launch
    device code (cubin, PTX, code objects, HIP source). The variant is "user:" + name (default: the file's
    stem). Returns a UserKernel message."""
    import os
    k = bench_pb2.UserKernel(backend=backend, flags=list(flags))
    if source is not None:
        k.source = source
        k.filename = (name or "kernel") + {"cuda": ".cu", "hip": ".hip"}.get(backend, ".cc")
    else:
        data = open(path, "rb").read()
        k.filename = os.path.basename(path)
        elf = data[:4] == b"\x7fELF"
        machine = data[18] if elf and len(data) > 19 and data[19] == 0 else 0
        if machine == 190:  # EM_CUDA
            k.cubin = data
        elif machine == 224:  # EM_AMDGPU
            k.code_object = data
        elif elf:
            k.shared_object = data
        elif path.endswith(".ptx"):
            k.ptx = data.decode()
        else:
            k.source = data.decode()
            if not backend and path.endswith(".hip"):
                k.backend = "hip"  # only ever built for hip: a server of another backend refuses it by name
    k.name = name or k.filename.split(".")[0]
    if grid is not None or block is not None or shared_mem:
        dims = lambda d: (list(d) if isinstance(d, (list, tuple)) else [d or 0]) + [1, 1]  # noqa: E731
        g, b = dims(grid), dims(block)
        k.launch.CopyFrom(bench_pb2.CudaLaunch(grid_x=g[0], grid_y=g[1], grid_z=g[2], block_x=b[0], block_y=b[1],
                                               block_z=b[2], dynamic_shared_bytes=shared_mem))
    return k


def make_spec(spec=None, op=None, shape=None, variants=None, method="kernel", warmup=0, iters=0, passes=0,
              warmin_s=0.0, window_s=0.0, l2_flush=False, graph_replays=0, inputs="gaussian", seed=0, name="",
              priority=0, tolerance=0.0, device=0, time_limit_s=0.0, submitter="", user_kernels=()):
    if spec is not None:
        if isinstance(spec, bench_pb2.BenchJobSpec):
            return spec
        return json_format.ParseDict(spec, bench_pb2.BenchJobSpec())
    if op is None or shape is None:
        raise ValueError("submit: give spec=, or op= and shape= (op one of %s)" % ", ".join(_OPS))
    op = _key(op, _OPS, "op")
    s = bench_pb2.BenchJobSpec(name=name or op, op=_OPS[op], variants=list(variants or []), priority=priority,
                               tolerance=tolerance, device=device, time_limit_s=time_limit_s, submitter=submitter)
    parse_shape(op, shape, s)
    for k in user_kernels:
        s.user_kernels.add().CopyFrom(k if isinstance(k, bench_pb2.UserKernel)
                                      else json_format.ParseDict(k, bench_pb2.UserKernel()))
    if user_kernels and not name:
        s.name = "%s %s" % (op, " ".join(k.name for k in s.user_kernels))
    s.method.CopyFrom(bench_pb2.MethodOptions(method=_METHODS[_key(method, _METHODS, "method")], warmup=warmup,
                                              iters=iters, passes=passes, warmin_s=warmin_s, window_s=window_s,
                                              l2_flush=l2_flush, graph_replays=graph_replays))
    s.inputs.seed = seed
    if isinstance(inputs, dict):
        s.inputs.kind = bench_pb2.INPUT_BUFFERS
        for k, v in inputs.items():
            s.inputs.buffers[k] = v if isinstance(v, str) else v.id
    else:
        s.inputs.kind = _INPUTS[_key(inputs, _INPUTS, "inputs")]
    return s


class ProgressBar:
    """A tqdm-style one-line text bar (stderr by default; notebooks show it under the cell)."""

    def __init__(self, file=None, width=30):
        self.file = file or sys.stderr
        self.width = width
        self.last = ""

    def update(self, fraction, text):
        fraction = min(max(fraction, 0.0), 1.0)
        n = int(round(fraction * self.width))
        line = "[%s%s] %3d%% %s" % ("#" * n, "." * (self.width - n), int(fraction * 100), text)
        pad = " " * max(0, len(self.last) - len(line))
        self.file.write("\r" + line + pad)
        self.file.flush()
        self.last = line

    def close(self):
        self.file.write("\n")
        self.file.flush()


def _event_text(e):
    """'phase: what' for the bar: the server's message when it has one, else the variant and pass."""
    parts = [bench_pb2.BenchPhase.Name(e.phase).replace("PHASE_", "").lower() + ":"]
    if e.phase == bench_pb2.PHASE_RESULT and e.result.variant:
        r = e.result
        parts.append("%s %s" % (r.variant, ("%.4g ms" % r.time.value_ms) if r.timed else
                                ("gate FAILED" if not r.correct else "untimed")))
    elif e.message:
        parts.append(e.message[:60])
    else:
        if e.variant:
            parts.append(e.variant)
        if e.passes:
            parts.append("pass %d/%d" % (getattr(e, "pass"), e.passes))
    return " ".join(parts)


class Job:
    """A benchmark job on the server. watch() follows it with a progress bar; records() gives its results as
    a list of dicts (pandas.DataFrame(job.records())); plot() and html_report() draw them."""

    def __init__(self, client, proto):
        self._client = client
        self.proto = proto

    @property
    def id(self):
        return self.proto.id

    @property
    def state(self):
        return bench_pb2.BenchJobState.Name(self.proto.state).replace("JOB_", "").lower()

    @property
    def done(self):
        return self.proto.state in _TERMINAL

    def refresh(self):
        c = self._client
        self.proto = c._call(c._bench.Get, bench_pb2.GetBenchRequest(job_id=self.id))
        return self

    def watch(self, progress=True, file=None, timeout=None):
        """Follows the job until it ends (drawing a progress bar unless progress=False); returns self.

        Raises kernelserve.Error if the watch fails; a job that FAILED is returned (see .state, .error)."""
        c = self._client
        bar = ProgressBar(file) if progress else None
        try:
            for e in c._stream(c._bench.Watch, bench_pb2.WatchBenchRequest(job_id=self.id), timeout=timeout):
                if bar:
                    bar.update(e.progress, _event_text(e))
                if e.HasField("job") and e.job.id:
                    self.proto = e.job
                if e.state in _TERMINAL:
                    break
        finally:
            if bar:
                bar.close()
        return self.refresh()

    def wait(self, poll_s=0.2, timeout=None):
        """Polls until the job ends (no stream); returns self."""
        start = time.time()
        while not self.refresh().done:
            if timeout is not None and time.time() - start > timeout:
                raise TimeoutError("job %s still %s after %g s" % (self.id, self.state, timeout))
            time.sleep(poll_s)
        return self

    def cancel(self, reason=""):
        c = self._client
        self.proto = c._call(c._bench.Cancel, bench_pb2.CancelBenchRequest(job_id=self.id, reason=reason))
        return self

    @property
    def error(self):
        return self.proto.error

    def to_dict(self):
        return to_dict(self.proto)

    def records(self):
        """One dict per variant: gate, error, time statistics, rates, ceilings fractions, clocks."""
        return _report.records(self.to_dict())

    def plot(self, path=None, **kw):
        """A matplotlib Figure of the results (time, rate vs roofline, gate, clocks); saved when path is given
        (.png or .svg)."""
        return _report.plot_job(self.to_dict(), path, **kw)

    def html_report(self, path=None):
        """One self-contained HTML file (plots embedded, results table); returns the HTML text."""
        return _report.html_report([self.to_dict()], path)

    def _repr_html_(self):
        return _report.html_table(self.records())

    def __repr__(self):
        return "Job(%s, %s, %s, %d results)" % (self.id, self.state, self.proto.shape_desc, len(self.proto.results))
