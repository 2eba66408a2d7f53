"""Kernel calls over one KernelService.Session stream: Client(..., session=True).

The Python side of the C++ client's KernelSession (client/kernel_session.h),
with the same rules: calls take turns on the stream, one request on it at a
time, each answered in order with its own status (a call that fails leaves
the session serving); a call whose timeout passes cancels the stream, and the
next call opens a new one; a request that provably never left (its stream
had already ended) is sent once more on a fresh stream, and nothing is sent
twice once it may have reached the server.

Two ways to drive the stream, one interface (exchange, cancel, finish):
- _DirectStream (the default): grpcio's own blocking call machinery, the one
  its unary calls run on (cygrpc's segregated call), so the calling thread
  writes the request and polls for the answer itself. That is what makes a
  session call cheaper than a unary one in Python: grpcio's public streaming
  API hands every request to a sending thread and every answer back from
  its polling thread, which costs more than a unary call's setup saves.
- _IteratorStream: that public API (a request iterator fed by a queue), for a
  grpcio whose internals differ (session=True falls back to it) or when
  asked for (session="iterator").
- _RingStream (ring_bytes > 0, a server on this host): the calls through a
  shared-memory ring, as the C++ client's kernel_session_ring_bytes
  (common/shm_ring.h has the layout); the stream, driven as _IteratorStream,
  stays open as the control channel and says when the server is gone.
"""
import ctypes
import mmap
import os
import platform
import queue
import secrets
import threading
import time

import grpc

from kernelserve.v1 import kernel_pb2

SESSION_METHOD = "/kernelserve.v1.KernelService/Session"
_CODE_NAMES = {c.value[0]: c.name for c in grpc.StatusCode}


def code_name(code):
    """The gRPC status name of an integer code (SessionResponse.code)."""
    return _CODE_NAMES.get(code, "UNKNOWN")


class Failure(Exception):
    """The stream failed (it ended, could not be opened, or a call's timeout passed): code is a gRPC status
    name. A call that the server answered with an error is not a Failure: its response carries the code."""

    def __init__(self, code, message):
        super().__init__("%s: %s" % (code, message))
        self.code, self.message = code, message


def _direct_api(channel):
    """cygrpc, when it and the channel have what _DirectStream uses (grpcio 1.51 does); None otherwise."""
    try:
        from grpc._cython import cygrpc
    except ImportError:
        return None
    names = ("SendInitialMetadataOperation", "ReceiveInitialMetadataOperation", "ReceiveStatusOnClientOperation",
             "SendMessageOperation", "ReceiveMessageOperation", "SendCloseFromClientOperation",
             "PropagationConstants", "StatusCode")
    if not (all(hasattr(cygrpc, n) for n in names) and hasattr(getattr(channel, "_channel", None), "segregated_call")):
        return None
    return cygrpc


class _DirectStream:
    """The stream as a segregated call: its completion queue is polled by the thread that waits for an event,
    as grpcio's blocking unary calls are. `_due` mirrors the batches grpcio still holds: once none is due it
    frees the queue, so the queue must not be polled again."""

    def __init__(self, channel, metadata, cygrpc):
        self._c = cygrpc
        self.status = None  # (code name, details) once the stream ended
        self._due = {"status", "metadata"}
        metadata = tuple(metadata)
        self._call = channel._channel.segregated_call(
            cygrpc.PropagationConstants.GRPC_PROPAGATE_DEFAULTS, SESSION_METHOD.encode(), None, None, metadata, None,
            (((cygrpc.SendInitialMetadataOperation(metadata, 0), cygrpc.ReceiveStatusOnClientOperation(0)), "status"),
             ((cygrpc.ReceiveInitialMetadataOperation(0),), "metadata")), None)

    def _operate(self, op, tag):
        if self.status is None and self._call.operate((op,), tag):
            self._due.add(tag)
            return True
        return False

    def _next(self):
        try:
            event = self._call.next_event()
        except BaseException:
            # A signal (KeyboardInterrupt) while polling: grpcio has freed the call and its queue.
            self._due.clear()
            self.status = self.status or ("CANCELLED", "session: interrupted")
            raise
        self._due.discard(event.tag)
        if event.tag == "status":
            op = event.batch_operations[-1]
            self.status = (code_name(op.code()), op.details())
        return event

    def exchange(self, data):
        """Sends one request and waits for the answer: (answer bytes or None when the stream ended first,
        whether the request may have left)."""
        if not self._operate(self._c.SendMessageOperation(data, 0), "send"):
            return None, False
        self._operate(self._c.ReceiveMessageOperation(0), "recv")
        answer, sent = None, True
        while "send" in self._due or "recv" in self._due:
            event = self._next()
            if event.tag == "send":
                sent = event.success
            elif event.tag == "recv":
                answer = event.batch_operations[0].message()
        return answer, sent

    def cancel(self):
        """Thread-safe; a no-op on a stream that ended."""
        self._call.cancel(self._c.StatusCode.cancelled, "session: cancelled by the client")

    def finish(self, cancel):
        """Ends the stream (cancelled, or half-closed for the server to end it) and waits for its status."""
        if cancel:
            self.cancel()
        else:
            self._operate(self._c.SendCloseFromClientOperation(0), "close")
        while self._due:
            self._next()
        return self.status


class _Request:
    __slots__ = ("data", "handed")

    def __init__(self, data):
        self.data, self.handed = data, False


def _forget_frames(error):
    """grpcio's streaming call raises itself as its RpcError, so its traceback holds our frames, which hold the
    call: a cycle that, through the frames' callers, keeps the Client alive until Python's cycle collector runs,
    and with it the stream that a dropped Client's finalizer should end."""
    error.__traceback__ = None


class _IteratorStream:
    """The stream through grpcio's public API: requests through a queue to grpcio's sending thread."""
    _END = None

    def __init__(self, channel, metadata):
        self._queue = queue.SimpleQueue()
        self._call = channel.stream_stream(SESSION_METHOD)(self._requests(), metadata=metadata)

    @property
    def status(self):
        return (self._call.code().name, self._call.details()) if self._call.done() else None

    def _requests(self):
        while True:
            request = self._queue.get()
            if request is self._END:
                return
            # Marked before the check: a request the caller finds unmarked never reaches grpcio.
            request.handed = True
            if self._call.done():
                return
            yield request.data

    def exchange(self, data):
        if self._call.done():
            return None, False
        request = _Request(data)
        self._queue.put(request)
        try:
            return next(self._call), True
        except (StopIteration, grpc.RpcError) as e:
            _forget_frames(e)
            return None, request.handed

    def cancel(self):
        self._call.cancel()

    def finish(self, cancel):
        if cancel:
            self._call.cancel()
        self._queue.put(self._END)  # half-closes a live stream; ends grpcio's sending thread either way
        try:
            for _ in self._call:
                pass
        except grpc.RpcError as e:
            _forget_frames(e)
        return self.status


# common/shm_ring.h's ShmRingHeader: magic, capacity, req_seq, resp_seq, closed, req_len, resp_len (uint32 each),
# then the request area and the response area, `capacity` bytes each.
_RING_MAGIC = 0x4B53524E
_MAGIC, _CAPACITY, _REQ_SEQ, _RESP_SEQ, _CLOSED, _REQ_LEN, _RESP_LEN = range(7)
_RING_HEADER = 7 * 4
# How often a call waiting on the ring looks whether its stream ended (a server that died mid-call never sets
# `closed`) or it was cancelled.
_RING_CHECK_S = 0.02


def _ring_support():
    """(shm_open/shm_unlink module, futex(2) function), or the reason this Python cannot drive a ring. x86-64
    Linux only: the header's words are plain 4-byte loads and stores here, which x86's memory order makes the
    release and acquire that the C++ side uses."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return "the Python client drives rings on x86-64 Linux only (this is %s %s)" % (
            platform.system(), platform.machine())
    try:
        import _posixshmem
        libc = ctypes.CDLL(None, use_errno=True)
        syscall = libc.syscall
    except (ImportError, OSError, AttributeError) as e:
        return "no shm_open or syscall() in this Python: %s" % e
    syscall.restype = ctypes.c_long
    syscall.argtypes = (ctypes.c_long, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p,
                        ctypes.c_void_p, ctypes.c_uint32)
    sys_futex, futex_wait, futex_wake = 202, 0, 1

    class Timespec(ctypes.Structure):
        _fields_ = (("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long))

    def futex(address, wait, value=0, timeout=None):
        if not wait:
            syscall(sys_futex, address, futex_wake, 1, None, None, 0)
            return
        ts = Timespec(int(timeout), int((timeout % 1) * 1e9))
        # ctypes releases the GIL for the call: other threads run while this one sleeps.
        syscall(sys_futex, address, futex_wait, value, ctypes.byref(ts), None, 0)

    return _posixshmem, futex


_RING_SUPPORT = None


def ring_support():
    global _RING_SUPPORT
    if _RING_SUPPORT is None:
        _RING_SUPPORT = _ring_support()
    return _RING_SUPPORT


class _Ring:
    """One mapping of a ring this client created (shm_open, mode 0600, a random name), as ShmRing::Create."""

    def __init__(self, capacity):
        shm, self._futex = ring_support()
        self.capacity = capacity
        self.name = "/kernelserve-ring-%d-%d" % (secrets.randbits(32), secrets.randbits(32))
        self._shm = shm
        fd = shm.shm_open(self.name, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, _RING_HEADER + 2 * capacity)
            self._map = mmap.mmap(fd, _RING_HEADER + 2 * capacity)
        except BaseException:
            self.unlink()
            raise
        finally:
            os.close(fd)
        self._h = (ctypes.c_uint32 * 7).from_buffer(self._map)
        self._base = ctypes.addressof(self._h)
        self._h[_MAGIC], self._h[_CAPACITY] = _RING_MAGIC, capacity

    def unlink(self):
        """Removes the name (the mappings stay): once the server attached it, or refused it."""
        if self.name is not None:
            try:
                self._shm.shm_unlink(self.name)
            except FileNotFoundError:
                pass  # the server removed it on attach
            self.name = None

    def closed(self):
        return self._h[_CLOSED] != 0

    def wake(self, word):
        self._futex(self._base + 4 * word, wait=False)

    def exchange(self, data, gone):
        """Writes one request and waits for its answer: the answer's bytes, or None once the server left the
        ring or `gone()` says the stream ended or the call was cancelled."""
        h, n = self._h, len(data)
        self._map[_RING_HEADER:_RING_HEADER + n] = data
        h[_REQ_LEN] = n
        seq = (h[_REQ_SEQ] + 1) & 0xFFFFFFFF
        seen = h[_RESP_SEQ]
        h[_REQ_SEQ] = seq
        self.wake(_REQ_SEQ)
        while h[_RESP_SEQ] != seq:
            if h[_CLOSED] or gone():
                return None
            self._futex(self._base + 4 * _RESP_SEQ, wait=True, value=seen, timeout=_RING_CHECK_S)
        start = _RING_HEADER + self.capacity
        return self._map[start:start + h[_RESP_LEN]]

    def close(self):
        """Marks the ring closed (the server's loop then ends the session) and unmaps it."""
        if self._map is None:
            return
        self._h[_CLOSED] = 1
        self.wake(_REQ_SEQ)
        self.wake(_RESP_SEQ)
        self.unlink()
        self._h = None  # its export of the mapping must go before the mapping can be closed
        self._map.close()
        self._map = None


class _TooLarge(Failure):
    """A request over the ring's capacity: refused here, the session left as it was."""


class _RingStream:
    """The calls through a ring (ring_bytes > 0), the stream as its control channel: the first exchange asks the
    server to attach the ring; a refusal (another host or user, a ring over --max_message_mb) leaves this
    stream's calls on the stream and is reported through `refused` so that later streams do not ask."""

    def __init__(self, channel, metadata, capacity):
        self._control = _IteratorStream(channel, metadata)
        self._capacity = capacity
        self.refused = None  # (code, message) when the server (or this host) refused the ring
        self._ring = None
        self._cancelled = False
        self.attached = False

    @property
    def status(self):
        return self._control.status

    def _attach(self):
        """Whether the stream is still open (attached or refused)."""
        try:
            ring = _Ring(self._capacity)
        except OSError as e:
            self.refused = ("FAILED_PRECONDITION", "session ring: %s" % e)
            return True
        request = kernel_pb2.SessionRequest(id=0)
        request.attach_ring.shm_name = ring.name
        answer, _ = self._control.exchange(request.SerializeToString())
        if answer is None:
            ring.close()
            return False
        ack = kernel_pb2.SessionResponse.FromString(answer)
        ring.unlink()
        if ack.code != 0:
            ring.close()
            self.refused = (code_name(ack.code), ack.message)
            return True
        self._ring, self.attached = ring, True
        return True

    def exchange(self, data):
        if self._ring is None and not self.attached and self._capacity:
            self._capacity, opened = 0, self._attach()
            if not opened:
                return None, False
        if self._ring is None:
            return self._control.exchange(data)
        if self._ring.closed() or self._control.status is not None or self._cancelled:
            return None, False  # the server left while idle: never sent
        if len(data) > self._ring.capacity:
            raise _TooLarge("RESOURCE_EXHAUSTED", "session ring: a request of %d bytes is over the ring's %d (pass "
                          "large tensors as buffers)" % (len(data), self._ring.capacity))
        answer = self._ring.exchange(data, lambda: self._cancelled or self._control.status is not None)
        return answer, True

    def cancel(self):
        """Thread-safe: the watchdog's way to end a call whose timeout passed."""
        self._cancelled = True
        if self._ring is not None:
            self._ring.wake(_RESP_SEQ)
        self._control.cancel()

    def finish(self, cancel):
        if self._ring is not None:
            self._ring.close()
        return self._control.finish(cancel)


class _Watchdog:
    """Cancels the stream of a call whose timeout passed (grpcio's blocking waits take none). One thread per
    session, started by its first call; it wakes for the nearest deadline only, so arming it with the usual
    long timeouts costs a lock, not a thread switch."""

    def __init__(self):
        self._cv = threading.Condition()
        self._armed = None  # (deadline, stream)
        self._fired = False
        self._waiting_until = None
        self._thread = None
        self._stopped = False

    def arm(self, stream, deadline):
        with self._cv:
            self._armed, self._fired = (deadline, stream), False
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="kernelserve-session-watchdog", daemon=True)
                self._thread.start()
            elif self._waiting_until is None or deadline < self._waiting_until:
                self._cv.notify()

    def disarm(self):
        """Whether the deadline passed first (the stream is then cancelled already)."""
        with self._cv:
            self._armed = None
            return self._fired

    def stop(self):
        with self._cv:
            self._stopped = True
            self._cv.notify()

    def _run(self):
        with self._cv:
            while not self._stopped:
                now = time.monotonic()
                if self._armed is not None and self._armed[0] <= now:
                    # Cancelled under the lock, so that a disarm() that reports it finds it done.
                    self._armed[1].cancel()
                    self._armed, self._fired = None, True
                    continue
                self._waiting_until = self._armed[0] if self._armed is not None else None
                self._cv.wait(None if self._waiting_until is None else self._waiting_until - now)


class KernelSession:
    """One Session stream of a channel, opened by the first call and again after one ended."""

    def __init__(self, channel, metadata, iterator=False, ring_bytes=0):
        cygrpc = None if iterator else _direct_api(channel)
        self._transport = "direct" if cygrpc is not None else "iterator"
        if cygrpc is not None:
            self._plain_stream = lambda: _DirectStream(channel, metadata, cygrpc)
        else:
            self._plain_stream = lambda: _IteratorStream(channel, metadata)
        self._ring_stream = (lambda: _RingStream(channel, metadata, ring_bytes)) if ring_bytes else None
        self.ring_refused = None  # why the ring was not attached: (code, message)
        if ring_bytes:
            support = ring_support()
            if isinstance(support, str):
                self.ring_refused = ("UNIMPLEMENTED", "session ring: " + support)
        self._lock = threading.Lock()  # one call at a time
        self._stream = None
        self._next_id = 1
        self._watchdog = _Watchdog()
        self._closed = False
        self.opened = 0

    def _new_stream(self):
        if self._ring_stream is not None and self.ring_refused is None:
            return self._ring_stream()
        return self._plain_stream()

    @property
    def transport(self):
        """"ring" when asked for and not refused (ring_attached says whether the open stream's calls go through
        one); else how the stream is driven, "direct" or "iterator"."""
        return "ring" if self._ring_stream is not None and self.ring_refused is None else self._transport

    @property
    def ring_attached(self):
        return bool(getattr(self._stream, "attached", False))

    def call(self, request, timeout):
        """Sends `request` (a SessionRequest; its id is set here) and returns its SessionResponse, whose code
        says whether the call failed. Raises Failure when the stream failed or no answer came within
        `timeout` seconds."""
        with self._lock:
            if self._closed:
                raise ValueError("Cannot invoke RPC: the client's session was closed")  # as grpcio's closed channel
            request.id = self._next_id
            self._next_id += 1
            data = request.SerializeToString()
            deadline = time.monotonic() + timeout
            for attempt in (0, 1):
                reused = self._stream is not None
                if not reused:
                    self._stream = self._new_stream()
                    self.opened += 1
                self._watchdog.arm(self._stream, deadline)
                stream = self._stream
                try:
                    answer, sent = stream.exchange(data)
                except _TooLarge:
                    self._watchdog.disarm()
                    raise
                except BaseException:
                    self._watchdog.disarm()
                    self._drop(cancel=True)
                    raise
                # An answer that came after the deadline is a timeout too, as a unary call's would be: the
                # watchdog's thread may not have run yet on a loaded machine.
                timed_out = self._watchdog.disarm() or time.monotonic() > deadline
                if getattr(stream, "refused", None) is not None:
                    self.ring_refused = stream.refused
                if answer is not None and not timed_out:
                    break
                if timed_out:
                    self._drop(cancel=True)
                    raise Failure("DEADLINE_EXCEEDED", "session: no answer within %g s; the stream was cancelled "
                                  "(the next call opens a new one)" % timeout)
                code, details = self._drop(cancel=False)
                # A stream that had died before this call never saw the request: once more, on a fresh one.
                if reused and attempt == 0 and not sent:
                    continue
                if code == "OK":
                    raise Failure("UNAVAILABLE", "session: the server ended the session before answering the call")
                raise Failure(code, details)
            response = kernel_pb2.SessionResponse.FromString(answer)
            if response.id != request.id or (response.code == 0 and
                                             response.WhichOneof("result") != request.WhichOneof("call")):
                self._drop(cancel=True)
                raise Failure("DATA_LOSS", "session: request %d (%s) was answered by id %d (%s)" % (
                    request.id, request.WhichOneof("call"), response.id, response.WhichOneof("result")))
            return response

    def _drop(self, cancel):
        stream, self._stream = self._stream, None
        return stream.finish(cancel)

    def close(self, grace=5.0):
        """Ends the stream: half-closed for the server to end it within `grace` seconds (then cancelled).
        Later calls raise ValueError, as grpcio's calls on a closed channel do."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                if self._stream is not None:
                    self._watchdog.arm(self._stream, time.monotonic() + grace)
                    try:
                        self._drop(cancel=grace <= 0)
                    finally:
                        self._watchdog.disarm()
            finally:
                self._watchdog.stop()
