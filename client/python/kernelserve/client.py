"""kernelserve.Client: every RPC of the service with NumPy arrays in and out."""
import time
import weakref

import grpc
import numpy as np

from kernelserve import jobs as _jobs
from kernelserve import session as _session
from kernelserve import shm as _shm
from kernelserve import tensors as _t
from kernelserve.v1 import (bench_pb2, bench_pb2_grpc, device_pb2, device_pb2_grpc, kernel_pb2, kernel_pb2_grpc,
                            pool_pb2, pool_pb2_grpc, tensor_pb2, tensor_pb2_grpc)

_ROUNDING = {"rtne": kernel_pb2.RTNE, "rtna": kernel_pb2.RTNA, "rtz": kernel_pb2.RTZ}
_LAYOUT = {"bhsd": kernel_pb2.BHSD, "bshd": kernel_pb2.BSHD}
_FP8_FORMAT = {"e4m3fn": kernel_pb2.E4M3FN, "e4m3fnuz": kernel_pb2.E4M3FNUZ}
_P_MODE = {"exact": kernel_pb2.EXACT, "lean": kernel_pb2.LEAN, "naive": kernel_pb2.NAIVE}
_DESCALE = {"per_tensor": kernel_pb2.PER_TENSOR, "per_head": kernel_pb2.PER_HEAD}
_POOL_KIND = {"mla": pool_pb2.MLA_FUSED, "per_head": pool_pb2.PER_HEAD_KV}
# Each kernel op's unary RPC, by its field in a SessionRequest.
_KERNEL_RPCS = {"attention": "Attention", "fp8_attention": "Fp8Attention", "mla_decode": "MlaDecode",
                "moe": "Moe", "decode_attention": "DecodeAttention"}
# Chunk of an upload or a pool write: well under gRPC's default 4 MiB message limit on any server.
CHUNK_BYTES = 2 << 20


class Error(RuntimeError):
    """A call the server (or the channel) refused. code: the gRPC status name ("INVALID_ARGUMENT", ...)."""

    def __init__(self, code, message, method=""):
        super().__init__("%s: %s" % (code, message) + (" (%s)" % method if method else ""))
        self.code = code
        self.message = message
        self.method = method


def _method(rpc):
    """A stub method's full name ("/kernelserve.v1.KernelService/Attention"), as Error.method gives it."""
    return getattr(rpc, "_method", b"").decode(errors="replace")


def _choice(table, value, what):
    key = str(value).lower().replace("-", "_")
    if key not in table:
        raise ValueError("%s must be one of %s, got %r" % (what, ", ".join(table), value))
    return table[key]


class OpResult:
    """An op's output: out (ndarray, torch tensor, or a Buffer with to_buffer=True), error (dict, when
    report_error was asked), info (backend, device, queue_ms, run_ms from the server; wall_ms here)."""

    def __init__(self, out, error, info):
        self.out, self.error, self.info = out, error, info

    def __array__(self, dtype=None):
        a = np.asarray(self.out.download() if isinstance(self.out, Buffer) else self.out)
        return a if dtype is None else a.astype(dtype)

    def __repr__(self):
        shape = self.out.shape if hasattr(self.out, "shape") else "?"
        return "OpResult(out=%s%s, error=%s, info=%s)" % (
            type(self.out).__name__, list(shape), self.error, self.info)


class Buffer:
    """A server-resident tensor. Pass it to any op in place of an array. Freed by free() or on leaving
    a `with` block; download() brings it back as an array."""

    def __init__(self, client, info):
        self._client = client
        self.info = info
        self.id = info.id
        self.dtype = _t.dtype_name(info.dtype)
        self.shape = tuple(info.shape)
        self.size_bytes = info.size_bytes
        self.freed = False

    def download(self, as_torch=False, chunk_bytes=0):
        return self._client.download(self.id, as_torch=as_torch, chunk_bytes=chunk_bytes)

    def free(self):
        if not self.freed:
            self._client._call(self._client._buffers.Free, tensor_pb2.FreeBufferRequest(buffer_id=self.id))
            self.freed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()

    def __repr__(self):
        return "Buffer(%s, %s %s, %d bytes%s)" % (self.id, self.dtype, list(self.shape), self.size_bytes,
                                                   ", freed" if self.freed else "")


class Pool:
    """A server-resident KV pool (MLA fused fp8 rows, or per-head K/V). Deleted by delete() or on leaving a
    `with` block. Pass it as mla_decode(pool=...)."""

    def __init__(self, client, info):
        self._client = client
        self.info = info
        self.id = info.id
        self.deleted = False

    def write(self, slots, rows):
        """Writes rows [n, row_elements] (uint8 FP8 codes, or floats for a bf16 pool) into slots [n]."""
        c, info = self._client, self.stats(as_dict=False)
        dtype = _t.dtype_name(info.dtype)
        slots = np.asarray(slots)
        if dtype.startswith("fp8") and not isinstance(rows, _t.Tensor) and np.asarray(rows).dtype != np.uint8:
            raise TypeError("Pool.write: an %s pool takes rows as uint8 codes (kernelserve.fp8_encode makes them), "
                            "got dtype %s" % (dtype, np.asarray(rows).dtype))
        rows = _t.to_tensor(rows, dtype).array
        rows = rows.reshape(len(slots), -1)
        per = max(1, CHUNK_BYTES // max(1, rows[0].nbytes if len(rows) else 1))
        chunks = [pool_pb2.WritePoolChunk(pool_id=self.id, slots=_t.to_tensor(slots[i:i + per], "int32").proto(),
                                          rows=_t.Tensor(rows[i:i + per], dtype, raw=True).proto())
                  for i in range(0, len(slots), per)] or [pool_pb2.WritePoolChunk(pool_id=self.id)]
        r = c._call(c._pools.Write, iter(chunks))
        self.info = r.pool
        return r.rows_written

    def read(self, slots=None, start=0, count=0):
        """Rows back as an array [n, row_elements]: the listed slots, or [start, start+count)."""
        c = self._client
        req = pool_pb2.ReadPoolRequest(pool_id=self.id, start=start, count=count)
        if slots is not None:
            req.slots.CopyFrom(_t.to_tensor(np.asarray(slots), "int32").proto())
        parts = [_t.from_proto(m.rows) for m in c._stream(c._pools.Read, req) if m.rows.data]
        return np.concatenate(parts) if parts else np.zeros((0, self.info.row_elements))

    def stats(self, as_dict=True):
        c = self._client
        self.info = c._call(c._pools.Stats, pool_pb2.PoolStatsRequest(pool_id=self.id))
        return _jobs.to_dict(self.info) if as_dict else self.info

    def delete(self):
        if not self.deleted:
            c = self._client
            c._call(c._pools.Delete, pool_pb2.DeletePoolRequest(pool_id=self.id))
            self.deleted = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.delete()

    def __repr__(self):
        return "Pool(%s, %s, %d slots)" % (self.id, pool_pb2.PoolKind.Name(self.info.kind), self.info.num_slots)


class Client:
    """A connection to a kernelserve server.

    Client("127.0.0.1:50051")                                   plain gRPC (loopback)
    Client("node:50051", token="...", tls=True, root_certs="ca.pem")   TLS with a bearer token
    tls=True with client_cert/client_key for mTLS; server_name overrides the name checked in the certificate.
    session=True: the kernel ops travel as messages on one KernelService.Session stream (a shorter round trip
    for small calls; calls from several threads take turns on it); session="iterator": the same through
    grpcio's public streaming API, which is slower (README.md, Sessions). ring_bytes=N with session=True, for a
    server on this host: the session's calls through a shared-memory ring of N bytes each way instead of gRPC
    messages (README.md, Rings); a refused ring leaves them on the stream (ring_refused says why).
    shared_memory_transfer_min_bytes=N (default 1 MiB; 0: off): uploads of at least N bytes, and downloads,
    to a server at a loopback address go through a shared-memory object instead of the stream (README.md,
    Shared memory); where the server refuses it, they go over the stream (shared_memory_transfers says which).
    timeout: seconds per call.
    """

    def __init__(self, address, token=None, tls=False, root_certs=None, client_cert=None, client_key=None,
                 server_name=None, timeout=600.0, max_message_mb=1024, session=False, ring_bytes=0,
                 shared_memory_transfer_min_bytes=1 << 20):
        self.address = address
        self.timeout = timeout
        self._shm_min = int(shared_memory_transfer_min_bytes)
        self._shm_on = self._shm_min > 0 and _shm.is_loopback(address)
        self._regions = _shm.Regions()
        # The kept region's name must go with the Client, or at the latest when Python exits: /dev/shm keeps it.
        weakref.finalize(self, self._regions.close)
        self._metadata = (("authorization", "Bearer " + token),) if token else ()
        opts = [("grpc.max_receive_message_length", max_message_mb << 20),
                ("grpc.max_send_message_length", max_message_mb << 20)]
        if server_name:
            opts.append(("grpc.ssl_target_name_override", server_name))
        if tls or root_certs or client_cert:
            read = lambda p: open(p, "rb").read() if p else None  # noqa: E731
            creds = grpc.ssl_channel_credentials(read(root_certs), read(client_key), read(client_cert))
            self._channel = grpc.secure_channel(address, creds, options=opts)
        else:
            self._channel = grpc.insecure_channel(address, options=opts)
        self._kernels = kernel_pb2_grpc.KernelServiceStub(self._channel)
        self._buffers = tensor_pb2_grpc.BufferServiceStub(self._channel)
        self._pools = pool_pb2_grpc.PoolServiceStub(self._channel)
        self._bench = bench_pb2_grpc.BenchServiceStub(self._channel)
        self._devices = device_pb2_grpc.DeviceServiceStub(self._channel)
        if session not in (False, True, "iterator"):
            raise ValueError("session must be False, True or \"iterator\", got %r" % (session,))
        if ring_bytes and (session is not True or not 0 < ring_bytes < 1 << 32):
            raise ValueError("ring_bytes needs session=True and 0 < ring_bytes < 2**32, got ring_bytes=%r with "
                             "session=%r" % (ring_bytes, session))
        self._session = None
        if session:
            self._session = _session.KernelSession(self._channel, self._metadata, iterator=session == "iterator",
                                                   ring_bytes=int(ring_bytes))
            # A Client dropped without close() must not keep its stream open (it holds one of the tenant's
            # streaming slots on the server) nor the session's threads.
            weakref.finalize(self, self._session.close, 0)

    # ------------------------------------------------------------ plumbing
    @property
    def session_transport(self):
        """None without session=True; else how the session's calls travel: "direct" or "iterator" (the stream
        driven by grpcio's internals or its public API), or "ring" (asked for with ring_bytes, not refused)."""
        return self._session.transport if self._session is not None else None

    @property
    def ring_attached(self):
        """Whether the open session stream's calls go through a shared-memory ring (ring_bytes)."""
        return self._session is not None and self._session.ring_attached

    @property
    def ring_refused(self):
        """Why the ring asked for was not attached, as "CODE: message" (another host or user, a ring over the
        server's --max_message_mb, a Python that cannot drive one); None otherwise."""
        r = self._session.ring_refused if self._session is not None else None
        return "%s: %s" % r if r else None

    @property
    def shared_memory_transfers(self):
        """Whether buffer transfers may still go through shared memory: asked for, a loopback address, and not
        refused by the server (another host or user, an older server) so far."""
        return self._shm_on

    @property
    def sessions_opened(self):
        """Session streams opened so far: 1 while one stream serves; each timeout or broken stream adds one."""
        return self._session.opened if self._session is not None else 0

    def close(self):
        if self._session is not None:
            self._session.close()
        self._regions.close()
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, rpc, request, timeout=None):
        # Every error is raised after its except clause, from plain values: raised inside it, the frame's `e`
        # and e's traceback (which holds the frame, and so `self`) form a cycle that keeps this Client alive
        # until Python's cycle collector runs, and with it the session stream its finalizer should end.
        try:
            return rpc(request, timeout=timeout or self.timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            code, details = e.code().name, e.details()
        raise Error(code, details, _method(rpc))

    def _stream(self, rpc, request, timeout=None):
        try:
            for m in rpc(request, timeout=timeout or self.timeout, metadata=self._metadata):
                yield m
            return
        except grpc.RpcError as e:
            code, details = e.code().name, e.details()
        raise Error(code, details)

    def wait_ready(self, timeout=30.0):
        """Blocks until the channel connects; raises Error("UNAVAILABLE") after timeout seconds."""
        try:
            grpc.channel_ready_future(self._channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            raise Error("UNAVAILABLE", "no server answered at %s within %g s" % (self.address, timeout)) from None
        return self

    def devices(self):
        """The server's devices as a list of dicts."""
        return [_jobs.to_dict(d) for d in self._call(self._devices.List, device_pb2.ListDevicesRequest()).devices]

    # ------------------------------------------------------------ buffers
    def upload(self, array, dtype=None, label="", device=0):
        """Uploads an array as a server buffer (streamed in chunks) and returns a Buffer.

        dtype: the kernelserve type; default bf16 for float arrays, int32/int64 for integer arrays. FP8 codes,
        packed FP4 and E8M0 scales need dtype= (or a Tensor): upload(codes, dtype="fp8_e4m3fn")."""
        if isinstance(array, _t.Tensor):
            t = array
        elif dtype is not None:
            t = _t.Tensor(array, dtype)
        else:
            a = np.asarray(_t._torch_to_numpy(array) if _t.is_torch(array) else array)
            if a.dtype == np.uint8:
                raise TypeError("upload of a uint8 array needs dtype= (fp8_e4m3fn, fp8_e4m3fnuz, fp4_e2m1, e8m0 or "
                                "uint8)")
            t = _t.to_tensor(a, "bf16" if a.dtype.kind == "f" else "int32")
        header = tensor_pb2.UploadHeader(dtype=t.enum, shape=t.shape, label=label, device=device)
        if self._shm_on and t.array.nbytes >= self._shm_min:
            info = self._upload_shm(t, header)
            if info is not None:
                return Buffer(self, info)
        data = t.data()

        def chunks():
            yield tensor_pb2.UploadChunk(header=header, data=data[:CHUNK_BYTES])
            for i in range(CHUNK_BYTES, len(data), CHUNK_BYTES):
                yield tensor_pb2.UploadChunk(data=data[i:i + CHUNK_BYTES])

        return Buffer(self, self._call(self._buffers.Upload, chunks()))

    def download(self, buffer_id, as_torch=False, chunk_bytes=0):
        """A buffer's contents as an array (bf16 as float32 values).

        The chunks are copied once, at their offsets, into one buffer of the size the first chunk
        announces; a stream that leaves a gap, overruns it or lacks the buffer's info raises
        ks.Error (DATA_LOSS), as the C++ client does.
        """
        buffer_id = buffer_id.id if isinstance(buffer_id, Buffer) else buffer_id
        got = self._download_shm(buffer_id) if self._shm_on else None
        if got is not None:
            return _t.from_buffer(got[0], got[1].dtype, list(got[1].shape), as_torch)
        info, out, view, received = None, None, None, 0
        for m in self._stream(self._buffers.Download, tensor_pb2.DownloadRequest(buffer_id=buffer_id,
                                                                                 chunk_bytes=chunk_bytes)):
            if info is None:
                if not m.HasField("info"):
                    raise Error("DATA_LOSS", "download: the first chunk lacks the buffer info")
                info = m.info
                out = bytearray(info.size_bytes)
                view = memoryview(out)
            data = m.data
            if m.offset != received or m.offset + len(data) > len(out):
                raise Error("DATA_LOSS", "download: chunk at offset %d of %d bytes after %d of %d bytes received"
                            % (m.offset, len(data), received, len(out)))
            view[received:received + len(data)] = data
            received += len(data)
        if info is None or received != len(out):
            raise Error("DATA_LOSS", "download: the stream ended after %d of %d bytes"
                        % (received, len(out) if out is not None else -1))
        view.release()
        return _t.from_buffer(out, info.dtype, list(info.shape), as_torch)

    def _upload_shm(self, t, header):
        """An upload through shared memory: the array copied once into a region, the stream one header naming
        it. The BufferInfo, or None where it must go over the stream."""
        a = np.ascontiguousarray(t.array.astype(t.array.dtype.newbyteorder("<"), copy=False))
        try:
            region = self._regions.take(a.nbytes)
        except OSError:
            self._shm_on = False  # this host has no shared memory to give
            return None
        header.shm.shm_name = region.name

        def messages():
            # The header first: the server prepares the buffer's memory while the bytes are copied in, and reads
            # them once the stream ends.
            yield tensor_pb2.UploadChunk(header=header)
            region.view(a.nbytes)[:] = a.reshape(-1).view(np.uint8)

        try:
            info = self._call(self._buffers.Upload, messages())
        except Error as e:
            code, message = e.code, e.message
        else:
            self._regions.keep(region)
            return info
        region.close()
        header.ClearField("shm")
        if _shm.refused(code, message):
            self._shm_on = False
            return None
        raise Error(code, message, _method(self._buffers.Upload))

    def _download_shm(self, buffer_id):
        """A download through shared memory: the kept region (or a fresh one of shared_memory_transfer_min_bytes)
        offered first, one of the buffer's size when the server says that one is too small. (bytes, BufferInfo),
        or None where it must go over the stream (refused, or an older server that streamed the bytes)."""
        want = self._shm_min
        for _ in range(2):
            try:
                region = self._regions.take(want)
            except OSError:
                break
            req = tensor_pb2.DownloadRequest(buffer_id=buffer_id,
                                             shm=tensor_pb2.SharedMemoryRegion(shm_name=region.name))
            info, out, needed, failure, streamed = None, None, None, None, False
            try:
                call = self._buffers.Download(req, timeout=self.timeout, metadata=self._metadata)
                for m in call:
                    if info is not None or m.data or not m.HasField("info") \
                            or not 0 <= m.info.size_bytes <= region.size:
                        streamed = True  # data chunks (or nothing this client can use): an older server's answer
                        call.cancel()
                        break
                    info = m.info
                    # The destination's pages faulted in while the server writes the region.
                    out = np.empty(info.size_bytes, np.uint8)
                    _shm.prefault(out)
            except grpc.RpcError as e:
                failure = (e.code().name, e.details())
                needed = dict(e.trailing_metadata() or ()).get(_shm.BYTES_TRAILER)
            if streamed or (failure is None and info is None):
                region.close()
                break
            if failure is None:
                out[:] = region.view(info.size_bytes)
                self._regions.keep(region)
                return memoryview(out), info
            region.close()
            code, message = failure
            if code == "INVALID_ARGUMENT" and needed is not None and int(needed) > region.size:
                want = int(needed)
                continue
            if _shm.refused(code, message):
                break
            raise Error(code, message, _method(self._buffers.Download))
        self._shm_on = False
        return None

    def buffers(self):
        """This tenant's buffers, as Buffer objects (free() them, or use them in ops)."""
        return [Buffer(self, b) for b in self._call(self._buffers.List, tensor_pb2.ListBuffersRequest()).buffers]

    # ------------------------------------------------------------ pools
    def create_pool(self, kind="mla", num_slots=0, page_size=1, dtype="fp8_e4m3fn", num_heads=0, head_dim=0,
                    kv_scale=0.0, label="", device=0):
        """A KV pool: kind "mla" (rows of 576 FP8: latent 512 + rope 64, one kv_scale) or "per_head"."""
        req = pool_pb2.CreatePoolRequest(kind=_choice(_POOL_KIND, kind, "kind"), num_slots=num_slots,
                                         page_size=page_size, dtype=_t.dtype_enum(dtype), num_heads=num_heads,
                                         head_dim=head_dim, kv_scale=kv_scale, label=label, device=device)
        return Pool(self, self._call(self._pools.Create, req))

    def pools(self):
        return [Pool(self, p) for p in self._call(self._pools.List, pool_pb2.ListPoolsRequest()).pools]

    # ------------------------------------------------------------ ops
    def _ref(self, x, default, name):
        if isinstance(x, Buffer):
            return tensor_pb2.TensorRef(buffer_id=x.id)
        if isinstance(x, str):
            return tensor_pb2.TensorRef(buffer_id=x)
        if default.startswith("fp8") or default in ("fp4_e2m1", "e8m0"):
            if not isinstance(x, _t.Tensor):
                a = np.asarray(x)
                if a.dtype != np.uint8:
                    raise TypeError("%s: expected %s codes as a uint8 array (kernelserve.fp8_encode makes FP8 codes), "
                                    "got dtype %s" % (name, default, a.dtype))
                x = _t.Tensor(a, default)
        try:
            return tensor_pb2.TensorRef(tensor=_t.to_tensor(x, default).proto())
        except TypeError as e:
            message = "%s: %s" % (name, e)
        raise TypeError(message)

    def _refs(self, *specs):
        """_ref of each (x, default, name), the small float arrays of bf16 fields rounded in one pass."""
        xs = [x for x, _, _ in specs]
        batch = [i for i, (x, default, _) in enumerate(specs) if default == "bf16" and _t.batchable_bf16(x)]
        if len(batch) > 1:
            for i, t in zip(batch, _t.bf16_batch([xs[i] for i in batch])):
                xs[i] = t
        return [self._ref(x, default, name) for x, (_, default, name) in zip(xs, specs)]

    def _run(self, op, req, torch_out, to_buffer):
        rpc = getattr(self._kernels, _KERNEL_RPCS[op])
        start = time.perf_counter()
        r = self._call(rpc, req) if self._session is None else self._session_call(op, rpc, req)
        wall = (time.perf_counter() - start) * 1e3
        if to_buffer:
            out = self._buffer_info(r.out.buffer_id)
        else:
            out = _t.from_proto(r.out.tensor, as_torch=torch_out)
        # CallInfo's fields are scalars: read directly (json_format's walk costs tens of us a call).
        info = {f.name: getattr(r.info, f.name) for f in r.info.DESCRIPTOR.fields}
        info["wall_ms"] = wall
        # The rest of the call: (de)serialization and the transfer of inline tensors both ways.
        info["transfer_ms"] = max(0.0, wall - info.get("queue_ms", 0.0) - info.get("run_ms", 0.0))
        return OpResult(out, _jobs.to_dict(r.error) if req.report_error else None, info)

    def _session_call(self, op, rpc, req):
        """The op over the session: its response, or the unary call's Error (same code, message and method)."""
        sreq = kernel_pb2.SessionRequest()
        getattr(sreq, op).CopyFrom(req)
        try:
            resp = self._session.call(sreq, self.timeout)
        except _session.Failure as e:
            code, message = e.code, e.message
        else:
            code = None
        if code is not None:
            raise Error(code, message, _session.SESSION_METHOD)
        if resp.code:
            raise Error(_session.code_name(resp.code), resp.message, _method(rpc))
        return getattr(resp, op)

    def _buffer_info(self, buffer_id):
        for b in self._call(self._buffers.List, tensor_pb2.ListBuffersRequest()).buffers:
            if b.id == buffer_id:
                return Buffer(self, b)
        return Buffer(self, tensor_pb2.BufferInfo(id=buffer_id))

    @staticmethod
    def _common(req, rounding, report_error, to_buffer, label, device):
        req.rounding = _choice(_ROUNDING, rounding, "rounding")
        req.report_error = report_error
        req.output.to_buffer = to_buffer
        req.output.label = label
        req.device = device

    def attention(self, q, k, v, causal=False, layout="bhsd", softmax_scale=None, rounding="rtne",
                  report_error=False, to_buffer=False, label="", device=0):
        """bf16 attention. q [B,Hq,Sq,D], k/v [B,Hkv,Skv,D] (layout="bshd": [B,S,H,D]); floats are rounded to
        bf16. Returns OpResult; .out is float32 holding bf16 values (torch.bfloat16 for torch inputs)."""
        rq, rk, rv = self._refs((q, "bf16", "q"), (k, "bf16", "k"), (v, "bf16", "v"))
        req = kernel_pb2.AttentionRequest(q=rq, k=rk, v=rv, layout=_choice(_LAYOUT, layout, "layout"), causal=causal)
        if softmax_scale is not None:
            req.softmax_scale = softmax_scale
        self._common(req, rounding, report_error, to_buffer, label, device)
        return self._run("attention", req, _t.is_torch(q), to_buffer)

    def fp8_attention(self, q, k, v, causal=True, layout="bhsd", softmax_scale=None, format="e4m3fn",
                      p_mode="exact", hadamard=False, descale_mode="per_tensor", q_descale=None, k_descale=None,
                      v_descale=None, rounding="rtne", report_error=False, report_error_split=False,
                      to_buffer=False, label="", device=0):
        """FP8 attention (ZYFA). Float q/k/v are rounded to bf16 and quantized by the server; FP8 inputs are
        Tensor(codes, "fp8_e4m3fn") with fp32 descales ([1] or [B,H]). p_mode: exact, lean or naive."""
        fp8 = isinstance(q, _t.Tensor) and q.dtype.startswith("fp8")
        kind = (q.dtype if fp8 else "bf16")
        rq, rk, rv = self._refs((q, kind, "q"), (k, kind, "k"), (v, kind, "v"))
        req = kernel_pb2.Fp8AttentionRequest(
            q=rq, k=rk, v=rv,
            layout=_choice(_LAYOUT, layout, "layout"), causal=causal, format=_choice(_FP8_FORMAT, format, "format"),
            p_mode=_choice(_P_MODE, p_mode, "p_mode"), hadamard=hadamard,
            descale_mode=_choice(_DESCALE, descale_mode, "descale_mode"), report_error_split=report_error_split)
        for name, d in (("q_descale", q_descale), ("k_descale", k_descale), ("v_descale", v_descale)):
            if d is not None:
                getattr(req, name).CopyFrom(self._ref(np.atleast_1d(np.asarray(d, np.float32))
                                                      if not isinstance(d, (Buffer, str)) else d, "fp32", name))
        if softmax_scale is not None:
            req.softmax_scale = softmax_scale
        self._common(req, rounding, report_error or report_error_split, to_buffer, label, device)
        return self._run("fp8_attention", req, _t.is_torch(q), to_buffer)

    def mla_decode(self, q_lat, q_pe, kv=None, pool=None, kv_scale=0.0, seq_lens=None, kv_indices=None,
                   kv_indptr=None, q_lens=None, num_splits=0, kv_format="fp8_e4m3fn", softmax_scale=None,
                   rounding="rtne", report_error=False, to_buffer=False, label="", device=0):
        """MLA absorbed decode. q_lat [B,q_len,H,512], q_pe [B,q_len,H,64]; KV either kv [B,S,576] FP8 codes
        (uint8, of kv_format) or pool= a Pool with seq_lens, kv_indices and kv_indptr. q_lens: ragged windows."""
        if (kv is None) == (pool is None):
            raise ValueError("mla_decode: give exactly one of kv= (contiguous [B,S,576]) and pool=")
        r_lat, r_pe = self._refs((q_lat, "bf16", "q_lat"), (q_pe, "bf16", "q_pe"))
        req = kernel_pb2.MlaDecodeRequest(q_lat=r_lat, q_pe=r_pe, kv_scale=kv_scale, num_splits=num_splits)
        if kv is not None:
            req.kv.CopyFrom(self._ref(kv, kv_format, "kv"))
        else:
            req.pool_id = pool.id if isinstance(pool, Pool) else pool
        self._page_tables(req, seq_lens, kv_indices, kv_indptr, q_lens)
        if softmax_scale is not None:
            req.softmax_scale = softmax_scale
        self._common(req, rounding, report_error, to_buffer, label, device)
        return self._run("mla_decode", req, _t.is_torch(q_lat), to_buffer)

    def _page_tables(self, req, seq_lens, kv_indices, kv_indptr, q_lens):
        for name, x in (("seq_lens", seq_lens), ("kv_indices", kv_indices), ("kv_indptr", kv_indptr),
                        ("q_lens", q_lens)):
            if x is not None:
                getattr(req, name).CopyFrom(self._ref(x, "int32", name))

    def decode_attention(self, q, pool, seq_lens, kv_indices, kv_indptr, q_lens=None, softmax_scale=None,
                         rounding="rtne", report_error=False, to_buffer=False, label="", device=0):
        """Decode attention over a per-head KV pool (kind="per_head"). q [B,q_len,Hq,D] (q_len 1..8, D the
        pool's head_dim, Hq a multiple of its heads: GQA); seq_lens [B] tokens per request, the new ones
        included; kv_indices / kv_indptr [B+1] the page tables (slots for page size 1, pages otherwise);
        q_lens [B] ragged new-token counts (rows past them come back 0). Query t of request b sees keys
        j <= seq_lens[b] - q_lens[b] + t. Returns a Result with out [B,q_len,Hq,D]."""
        req = kernel_pb2.DecodeAttentionRequest(q=self._ref(q, "bf16", "q"),
                                                pool_id=pool.id if isinstance(pool, Pool) else pool)
        self._page_tables(req, seq_lens, kv_indices, kv_indptr, q_lens)
        if softmax_scale is not None:
            req.softmax_scale = softmax_scale
        self._common(req, rounding, report_error, to_buffer, label, device)
        return self._run("decode_attention", req, _t.is_torch(q), to_buffer)

    def _moe(self, stage, x, topk_ids, topk_weights=None, w13=None, w13_scales=None, w2=None, w2_scales=None,
             swiglu=False, weighted_sum=False, rounding="rtne", report_error=False, to_buffer=False, label="",
             device=0):
        req = kernel_pb2.MoeRequest(stage=stage, x=self._ref(x, "bf16", "x"),
                                    topk_ids=self._ref(topk_ids, "int32", "topk_ids"), swiglu=swiglu,
                                    weighted_sum=weighted_sum)
        for name, x_, kind in (("topk_weights", topk_weights, "fp32"), ("w13", w13, "fp4_e2m1"),
                               ("w13_scales", w13_scales, "e8m0"), ("w2", w2, "fp4_e2m1"),
                               ("w2_scales", w2_scales, "e8m0")):
            if x_ is not None:
                getattr(req, name).CopyFrom(self._ref(x_, kind, name))
        self._common(req, rounding, report_error, to_buffer, label, device)
        return self._run("moe", req, _t.is_torch(x), to_buffer)

    def moe_gateup(self, x, topk_ids, w13, w13_scales, swiglu=False, **kw):
        """MXFP4 MoE gate/up: x [T,K] -> [T*top_k, 2I] ([T*top_k, I] with swiglu). w13: packed FP4 uint8
        [E,2I,K/2] (element 2i in the low nibble of byte i), w13_scales: E8M0 uint8 [E,2I,K/32]."""
        return self._moe(kernel_pb2.GATEUP, x, topk_ids, w13=w13, w13_scales=w13_scales, swiglu=swiglu, **kw)

    def moe_down(self, a, topk_ids, w2, w2_scales, topk_weights=None, weighted_sum=False, **kw):
        """MXFP4 MoE down: a [T*top_k, I] (token-major pairs) -> [T*top_k, N], or [T, N] with weighted_sum
        (needs topk_weights [T, top_k] fp32). w2: packed FP4 [E,N,I/2], w2_scales [E,N,I/32]."""
        return self._moe(kernel_pb2.DOWN, a, topk_ids, topk_weights=topk_weights, w2=w2, w2_scales=w2_scales,
                         weighted_sum=weighted_sum, **kw)

    def moe_layer(self, x, topk_ids, topk_weights, w13, w13_scales, w2, w2_scales, **kw):
        """A whole MXFP4 MoE layer: x [T,K] -> [T,N] (gate/up, SwiGLU, down, weighted sum per token)."""
        return self._moe(kernel_pb2.LAYER, x, topk_ids, topk_weights=topk_weights, w13=w13, w13_scales=w13_scales,
                         w2=w2, w2_scales=w2_scales, **kw)

    # ------------------------------------------------------------ benchmark jobs
    def variants(self, op=None):
        """The variants the server offers (per op), as a list of dicts."""
        req = bench_pb2.ListVariantsRequest(op=_jobs.op_enum(op) if op else 0)
        return [_jobs.to_dict(v) for v in self._call(self._bench.ListVariants, req).variants]

    def submit(self, spec=None, **kw):
        """Submits a benchmark job and returns a Job. Either a spec (dict in the proto's field names, or a
        BenchJobSpec), or keywords: op, shape (dict), variants, method, warmup, iters, passes, warmin_s,
        window_s, l2_flush, inputs ("gaussian", "long_tail" or {name: Buffer}), seed, name, priority,
        tolerance, device, time_limit_s, submitter, user_kernels (your own kernels: user_kernel(path) or
        dicts in the proto's UserKernel fields; variants may then be empty). See README."""
        spec = _jobs.make_spec(spec, **kw)
        return _jobs.Job(self, self._call(self._bench.Submit, bench_pb2.SubmitBenchRequest(spec=spec)))

    def leaderboard(self, op, shape=None, include_builtin=False, limit=0):
        """Users' kernels of op ranked by their best passing time, per shape and device, as a list of dicts
        (pandas.DataFrame(...)). shape (a dict as for submit) picks one shape; none: every shape."""
        req = bench_pb2.LeaderboardRequest(op=_jobs.op_enum(op), include_builtin=include_builtin, limit=limit)
        if shape is not None:
            _jobs.parse_shape(op, shape, req)
        return [_jobs.to_dict(e) for e in self._call(self._bench.Leaderboard, req).entries]

    def job(self, job_id):
        return _jobs.Job(self, self._call(self._bench.Get, bench_pb2.GetBenchRequest(job_id=job_id)))

    def jobs(self, states=None, submitter="", limit=100):
        req = bench_pb2.ListBenchRequest(submitter=submitter, limit=limit,
                                         states=[_jobs.state_enum(s) for s in (states or [])])
        return [_jobs.Job(self, j) for j in self._call(self._bench.List, req).jobs]
