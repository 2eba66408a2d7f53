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
"""
import queue
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

    def __init__(self, channel, metadata, iterator=False):
        cygrpc = None if iterator else _direct_api(channel)
        self.transport = "direct" if cygrpc is not None else "iterator"
        if cygrpc is not None:
            self._new_stream = lambda: _DirectStream(channel, metadata, cygrpc)
        else:
            self._new_stream = lambda: _IteratorStream(channel, metadata)
        self._lock = threading.Lock()  # one call at a time
        self._stream = None
        self._next_id = 1
        self._watchdog = _Watchdog()
        self._closed = False
        self.opened = 0

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
                try:
                    answer, sent = self._stream.exchange(data)
                except BaseException:
                    self._watchdog.disarm()
                    self._drop(cancel=True)
                    raise
                timed_out = self._watchdog.disarm()
                if answer is not None:
                    if timed_out:
                        self._drop(cancel=True)
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
