"""The coordinator's side of the round channel (:mod:`tls_rounds`): one connection per party, every round's frames
sent and the replies read through one ``select`` loop with the round's deadline.
"""

from __future__ import annotations

import selectors
import socket
import ssl
import time

from .grpc_stream import StreamError, parse_reply
from .tls_context import HEADER, MAX_FRAME, _host


class RoundClient:
    """The coordinator's connection to one party's round channel: a non-blocking socket that
    :func:`exchange` drives for all the round's parties at once (from the backend's calling thread)."""

    def __init__(self, sock):
        self.sock = sock
        self.broken = False  # lost, timed out mid-frame or malformed: the backend drops it
        self.out = b""
        self.sent = 0
        self.buf = bytearray()

    @classmethod
    def open(cls, host: str, port: int, name: str, ctx: ssl.SSLContext | None, timeout: float) -> "RoundClient":
        """Connect (raises ``ssl.SSLError`` — ``ssl.SSLCertVerificationError`` for a party whose certificate is not
        ``name``'s from the CA — or ``OSError`` for an unreachable port, ``TimeoutError`` after ``timeout``)."""
        raw = socket.create_connection((_host(host), int(port)), timeout=timeout)
        try:
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock = ctx.wrap_socket(raw, server_hostname=name) if ctx is not None else raw
        except BaseException:
            raw.close()
            raise
        sock.setblocking(False)
        return cls(sock)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def exchange(conns: dict, frames: dict, timeout: float, on_reply=None) -> dict:
    """Send ``frames[name]`` (a :func:`grpc_stream.frame`) on each ``conns[name]`` and read one reply each, all
    parties at once (one ``select`` loop), within ``timeout`` seconds. Returns ``{name: reply message}`` or an
    exception for that party: :class:`~dpadmm.backends.grpc_stream.StreamError` for a refusal, an error in the
    party's step (both from :func:`parse_reply`), ``DEADLINE_EXCEEDED`` or a lost connection (``UNAVAILABLE``).
    ``on_reply(name, message)`` (e.g. decoding) runs as each reply arrives; its result is what is returned."""
    out: dict = {}
    sel = selectors.DefaultSelector()
    events_of: dict = {}  # name -> the events its socket is registered for (after the first pass)
    both = selectors.EVENT_WRITE | selectors.EVENT_READ
    for name, conn in conns.items():
        data = frames[name]
        conn.out, conn.sent, conn.buf = HEADER.pack(len(data)) + data, 0, bytearray()

    def finish(name, conn, result):
        out[name] = result
        if name in events_of:
            sel.unregister(conn.sock)

    def pump(name, conn, read=True):
        """Move what can be moved without blocking; True once the reply is complete."""
        while conn.sent < len(conn.out):
            try:
                conn.sent += conn.sock.send(memoryview(conn.out)[conn.sent:conn.sent + (1 << 20)])
            except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError):
                break
        while read:
            try:
                chunk = conn.sock.recv(1 << 20)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                return False
            if not chunk:
                raise ConnectionResetError("the party closed its round channel")
            conn.buf += chunk
            if len(conn.buf) >= HEADER.size:
                (n,) = HEADER.unpack_from(conn.buf)
                if not 0 < n <= MAX_FRAME:
                    raise ValueError(f"a reply frame of length {n}")
                if len(conn.buf) >= HEADER.size + n:
                    if len(conn.buf) > HEADER.size + n:
                        raise ValueError("bytes after the reply frame")
                    return True
        return False

    deadline = time.monotonic() + timeout
    pending = dict(conns)
    try:
        # a first pass without waiting (the frames go out at once), then wait for the sockets that are not done
        ready = [(name, conn) for name, conn in pending.items()]
        first = True
        while pending:
            for name, conn in ready:
                if name not in pending:
                    continue
                try:
                    done = pump(name, conn, read=not first)  # a reply cannot be there before its frame left
                except (OSError, ssl.SSLError, EOFError, ValueError) as exc:
                    lost = not isinstance(exc, ValueError)
                    conn.broken = True
                    finish(name, conn, StreamError("UNAVAILABLE" if lost else "INTERNAL",
                                                   "the party closed its round channel (connection lost)" if lost
                                                   else f"a malformed reply on the round channel ({exc})"))
                    del pending[name]
                    continue
                if done:
                    body = bytes(memoryview(conn.buf)[HEADER.size:])
                    conn.buf = bytearray()
                    try:
                        msg = parse_reply(body)
                        result = on_reply(name, msg) if on_reply is not None else msg
                    except StreamError as exc:
                        result = exc
                    finish(name, conn, result)
                    del pending[name]
                else:
                    want = selectors.EVENT_READ if conn.sent >= len(conn.out) else both
                    if name not in events_of:
                        sel.register(conn.sock, want, name)
                    elif events_of[name] != want:
                        sel.modify(conn.sock, want, name)
                    events_of[name] = want
            first = False
            if not pending:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                break
            events = sel.select(left)
            ready = [(key.data, pending[key.data]) for key, _ in events if key.data in pending]
            # bytes TLS has already decrypted are not visible to select: pump those too
            ready += [(n, c) for n, c in pending.items() if c.sock is not None and hasattr(c.sock, "pending")
                      and c.sock.pending() and (n, c) not in ready]
        for name, conn in pending.items():
            conn.broken = True
            out[name] = StreamError("DEADLINE_EXCEEDED", "no answer on the round channel")
    finally:
        sel.close()
    return out
