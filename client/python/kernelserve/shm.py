"""Buffer transfers through shared memory for a server on this host (tensor.proto's SharedMemoryRegion), as the
C++ client's ClientOptions::shared_memory_transfer_min_bytes: the array is copied once into a POSIX shared-memory
object of this process's and the server reads it there (or writes a download there), instead of the bytes
crossing the loopback socket. The server takes only an object owned by the calling process's user."""
import ctypes
import mmap
import os
import secrets
import threading

import numpy as np

# The region kept for the next transfer, at most: what it holds stays in the host's memory (/dev/shm) while the
# Client lives. Reusing it matters: a fresh object's pages fault in on first touch, which costs more than the copy.
MAX_KEPT_BYTES = 256 << 20
# The trailing metadata entry where the server gives a download's size (common/shm_region.h).
BYTES_TRAILER = "kernelserve-buffer-bytes"


def is_loopback(address):
    """Whether a channel address names this host by a loopback address: 127.x.x.x, [::1] or localhost, with or
    without a dns:///, ipv4: or ipv6: scheme."""
    for scheme in ("dns:///", "dns:", "ipv4:", "ipv6:"):
        if address.startswith(scheme):
            address = address[len(scheme):]
            break
    host = address
    if host.startswith("["):
        host = host[1:].split("]", 1)[0]
    elif host != "::1" and ":" in host:
        host = host.rsplit(":", 1)[0]
    return host in ("localhost", "::1") or host.startswith("127.")


_madvise = None


def prefault(array):
    """Faults in the whole pages of a fresh array now, for writing (MADV_POPULATE_WRITE, Linux 5.14+), so that a
    copy into it later pays no page faults: done while the server writes a download. Best effort."""
    global _madvise
    if _madvise is None:
        try:
            _madvise = ctypes.CDLL(None, use_errno=True).madvise
            _madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        except (OSError, AttributeError):
            _madvise = False
    if not _madvise or array.nbytes == 0:
        return
    page = mmap.PAGESIZE
    begin = array.ctypes.data
    first, last = -(-begin // page) * page, (begin + array.nbytes) // page * page
    if last > first:
        _madvise(first, last - first, 23)  # MADV_POPULATE_WRITE


def _shm_open(name, flags, mode):
    try:
        import _posixshmem
        return _posixshmem.shm_open(name, flags, mode)
    except ImportError:
        return os.open("/dev/shm" + name, flags | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), mode)


def _shm_unlink(name):
    try:
        import _posixshmem
        _posixshmem.shm_unlink(name)
    except ImportError:
        os.unlink("/dev/shm" + name)


_PREFIX = "kernelserve-buf-"
_orphans_removed = False


def remove_orphans():
    """Removes this user's objects of Region (C++: ShmRegion::Create) whose process is gone: one killed while it
    held a region would otherwise leave it in /dev/shm until the host restarts."""
    try:
        names = os.listdir("/dev/shm")
    except OSError:
        return
    for name in names:
        pid = name[len(_PREFIX):].split("-", 1)[0]
        if not name.startswith(_PREFIX) or not pid.isdigit() or int(pid) <= 0:
            continue
        try:
            os.kill(int(pid), 0)
            continue
        except ProcessLookupError:
            pass
        except OSError:
            continue
        try:
            if os.stat("/dev/shm/" + name, follow_symlinks=False).st_uid == os.geteuid():
                _shm_unlink("/" + name)
        except OSError:
            pass


class Region:
    """A fresh shared-memory object of `size` bytes (mode 0600), mapped read-write; close() (or garbage
    collection) unmaps it and removes the name. The name carries this process's id (remove_orphans)."""

    def __init__(self, size):
        global _orphans_removed
        if not _orphans_removed:
            _orphans_removed = True
            remove_orphans()
        self.size = size
        self.name = "/%s%d-%d-%d" % (_PREFIX, os.getpid(), secrets.randbits(32), secrets.randbits(32))
        fd = _shm_open(self.name, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, size)
            self._map = mmap.mmap(fd, size) if size else None
        except BaseException:
            _shm_unlink(self.name)
            raise
        finally:
            os.close(fd)

    def view(self, n):
        """The first n bytes as a uint8 array over the mapping (no copy)."""
        return np.frombuffer(self._map, dtype=np.uint8, count=n) if n else np.zeros(0, np.uint8)

    def close(self):
        if self.name is None:
            return
        try:
            _shm_unlink(self.name)
        except FileNotFoundError:
            pass
        self.name = None
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:
                pass  # a view still exported: the mapping goes with it
            self._map = None

    def __del__(self):
        self.close()


class Regions:
    """The region kept between transfers, taken by one transfer at a time."""

    def __init__(self):
        self._lock = threading.Lock()
        self._kept = None

    def take(self, size):
        with self._lock:
            if self._kept is not None and self._kept.size >= size:
                r, self._kept = self._kept, None
                return r
        return Region(size)

    def keep(self, region):
        """After a transfer that succeeded only: a failed one may have left the server still using it."""
        if region.size > MAX_KEPT_BYTES:
            region.close()
            return
        with self._lock:
            if self._kept is None or self._kept.size < region.size:
                region, self._kept = self._kept, region
        if region is not None:
            region.close()

    def close(self):
        with self._lock:
            if self._kept is not None:
                self._kept.close()
                self._kept = None


def refused(code, message):
    """Whether a transfer's error says the server takes no shared memory from this client: another host or user
    (FAILED_PRECONDITION, PERMISSION_DENIED or NOT_FOUND naming the shm field) or a server that predates the
    field (an upload without data: INVALID_ARGUMENT about the data)."""
    about_shm = "shm" in message
    if code in ("FAILED_PRECONDITION", "PERMISSION_DENIED", "NOT_FOUND"):
        return about_shm
    return code == "INVALID_ARGUMENT" and not about_shm and message.startswith("data: ")
