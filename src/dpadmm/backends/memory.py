"""Memory a party returns after a large message (issue 36): the message's buffers are freed by Python, but glibc's
allocator keeps freed heap pages mapped (a 384 MiB burst of payloads left a party at 618 MiB). After a message larger
than ``TRIM_ABOVE`` the party asks the allocator to give its free pages back (``malloc_trim``, glibc only; elsewhere a
no-op), on a timer thread (ctypes releases the GIL for the call; it costs about a millisecond per 100 MiB of heap).
Measured on a party sent 4 × 96 MiB 1.5 s apart: 193 → 657 MiB before, 193 → 292 MiB after; sent back to back it
still kept 385 MiB (the trim runs 0.2 s after a call starts, possibly before gRPC frees the message): best effort."""

from __future__ import annotations

import ctypes
import ctypes.util
import threading

TRIM_ABOVE = 1 << 20  # bytes: messages larger than this are followed by a trim

_libc = None
_lock = threading.Lock()


def _trim() -> None:
    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _libc.malloc_trim.argtypes = [ctypes.c_size_t]
        except (OSError, AttributeError):
            _libc = False
    if _libc:
        _libc.malloc_trim(0)


def release_memory() -> None:
    """Return the allocator's free pages to the system (at most one trim at a time; the message's objects are freed
    by reference counting when the call drops them)."""
    if not _lock.acquire(blocking=False):
        return  # another thread is trimming
    try:
        _trim()
    finally:
        _lock.release()


def release_soon(delay: float = 0.2) -> None:
    """:func:`release_memory` on a thread after ``delay`` seconds: after the caller (e.g. gRPC's handler, which
    holds the request until it returns) has dropped the large message."""
    t = threading.Timer(delay, release_memory)
    t.daemon = True
    t.start()
