"""The rounds' own channel: one raw mutual-TLS connection per party, beside the gRPC control plane.

Why: a no-op round with 20 parties was 2.3–4× the process backend over gRPC, and most of it was gRPC
itself — a bare Python gRPC stream echo costs ~190 µs of server CPU per message, a mutual-TLS asyncio
socket echo ~73 µs (BENCHMARKS.md, "gRPC speed pass"). So the rounds' ``Step`` frames — the hot path —
travel on a plain TLS socket when the party offers one; everything else (Hello, Setup, Request,
Checkpoint, Finish, …) stays on gRPC.

**Party side** (:class:`RoundServer`, started by ``dpadmm party serve`` unless ``--rounds-listen off``):
listens on a second port (``--rounds-listen HOST:PORT``; default ``auto``: the ``--listen`` host and a
port the OS picks) and announces it in its Hello reply only while it listens (``"rounds": {"port": P}``).
The connection is TLS ≥ 1.2 built from the *same* certificate, key and CA as the party's gRPC server,
with a client certificate required and verified against that CA; the caller's identity is the
certificate's common name, which must be on the party's allow list — the rule of the gRPC path
(``peer_name`` and :meth:`PartyService.handle`, which checks it again for every frame). A failed
handshake (another CA, no certificate, a plaintext caller) and a name not on the allow list are refused
and closed, with one audit record each (method ``(TLS handshake)``, as the gRPC path's refused
handshakes, plus the caller's address, which gRPC's log does not give) and one log line.

**Frames**: a 4-byte big-endian length, then exactly a :func:`grpc_stream.frame` (request) or what
:func:`grpc_stream.serve_frame` returns (reply) — the same bytes as on the gRPC stream, served by the
same :meth:`PartyService.handle` (decoding, allow list, refusals, budget, audit line per Step). Only
``Step`` is served (``serve_frame`` refuses other methods). A length of 0 or above the party's cap
(``service.max_message``, ``party serve --max-message-mb``, default 64 MiB, at most ``MAX_MESSAGE``) is refused, audited and the connection closed; so is a frame cut short. A frame's memory grows with the
bytes that arrive (pieces of ``RECV_CHUNK``), never with the length it declares; and the bodies being received at
once, over every connection, hold at most ``IN_FLIGHT_FRAMES`` × the cap (:class:`_InFlight`: a frame that would pass
it waits for the others to finish), so many connections trickling frames just under the cap cannot hold more of the
party's memory than that (docs/redteam-2026-11-28.md). At ``MAX_CONNECTIONS`` the oldest
connection still in its handshake is closed to make room (callers without a certificate cannot lock the coordinator
out); with none, the new caller is refused — each audited. Stopping the server shuts every open connection down
(docs/redteam-tls-2026-11-24.md).

**Coordinator side** (:class:`RoundClient`, :func:`exchange`, used by
:class:`~dpadmm.backends.grpc_backend.GrpcBackend` with ``round_transport="tls"``): one connection per party,
with the coordinator's certificate, the party's certificate verified against the CA and its name checked to be
the party's expected name (the gRPC channel's target-name override), opened at the first round; each round's
frames go out and the replies come back through one ``select`` loop with the round's deadline.

``--insecure`` (local tests only): plain TCP with the same framing, no identities.
"""

from __future__ import annotations

import socket
import ssl
import threading

from ..exceptions import InvalidParameterError
from .grpc_stream import serve_frame
from .memory import TRIM_ABOVE, release_memory
from .refusal_log import RefusalLimiter, held_note, kind_of
from .tls_context import (  # noqa: F401 (re-exported: this module's public names before the split)
    AUDIT_METHOD, CHANNEL, HANDSHAKE_TIMEOUT, HEADER, MAX_CONNECTIONS, MAX_FRAME, _host, client_context, common_name,
    parse_listen, server_context,
)
from .tls_round_client import RoundClient, exchange  # noqa: F401 (re-exported: the coordinator's side)


def start_round_server(service, tls, rounds: str | None, listen: str) -> "RoundServer | None":
    """The party's round channel listening where ``rounds`` (``--rounds-listen``) says, or None (``off``/None);
    a port that cannot be bound is one clear error."""
    where = parse_listen(rounds, listen)
    if where is None:
        return None
    server = RoundServer(service, tls)
    try:
        server.start(*where)
    except OSError as exc:
        raise InvalidParameterError(f"cannot listen for rounds on {where[0]}:{where[1]} ({exc.strerror or exc}); "
                                    "give another --rounds-listen HOST:PORT (or off).") from None
    return server


IN_FLIGHT_FRAMES = 2  # frame bodies received at once, at the cap's size, over all connections


class _InFlight:
    """The bytes of frame bodies being received at once across the party's connections, at most ``limit``: a frame
    reserves its declared length before its body is read and waits while the others hold the rest (an honest
    coordinator's frames are served one after another; a caller trickling large bodies on many connections then
    holds at most ``limit`` bytes of the party's memory, not ``MAX_CONNECTIONS`` × the cap)."""

    def __init__(self, limit: int):
        self.limit, self.used = int(limit), 0
        self._cond = threading.Condition()

    def acquire(self, n: int, closed: threading.Event) -> bool:
        """Reserve ``n`` bytes (``n`` ≤ the limit); False when the server stopped while waiting."""
        with self._cond:
            while self.used + n > self.limit:
                if closed.is_set():
                    return False
                self._cond.wait(0.25)
            self.used += n
            return True

    def release(self, n: int) -> None:
        with self._cond:
            self.used -= n
            self._cond.notify_all()


class RoundServer:
    """The party's round channel: serves ``Step`` frames to allowed callers (see the module's docstring).

    Blocking sockets, one thread per connection (a party serves one coordinator): the TLS record layer and the
    socket I/O run in C without the event loop's Python SSL layer — measured 30–33 µs of server CPU per echoed
    message against 87 µs for an ``asyncio`` TLS server on the same machine (BENCHMARKS.md). The frames are served
    by :meth:`PartyService.handle`, which is thread-safe (its methods run under the service's lock)."""

    def __init__(self, service, tls=None):
        self.service = service
        self.ctx = server_context(tls) if tls is not None else None
        self._sock = None
        # connection → its socket now (the TLS socket once wrapped: wrapping detaches the raw one, whose shutdown
        # would then do nothing); those still in their handshake, oldest first (evicted first at MAX_CONNECTIONS)
        self._open: dict = {}
        self._pending: dict = {}
        self._evicted: set = set()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._limit = RefusalLimiter()
        cap = min(int(getattr(service, "max_message", MAX_FRAME)), MAX_FRAME)
        self._in_flight = _InFlight(IN_FLIGHT_FRAMES * cap)

    def start(self, host: str, port: int) -> int:
        """Listen on ``host:port`` (0: a free port) and accept on a thread; set ``service.round_port`` (Hello
        advertises it); return the port."""
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.create_server((host, port), family=family, backlog=16)
        bound = self._sock.getsockname()[1]
        threading.Thread(target=self._accept_loop, name="dpadmm-rounds", daemon=True).start()
        self.service.round_port = bound
        return bound

    def close(self) -> None:
        self.service.round_port = None  # Hello stops advertising it first
        self._closed.set()
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._sock.close()
            self._sock = None
        with self._lock:
            socks = list(self._open.values())
        for sock in socks:  # wakes each connection's thread (blocked in a read), which closes its socket and ends
            _shutdown(sock)
        for source, kind, count in self._limit.flush():  # the refusals only counted so far: on record
            self.service.audit("", kind[0], "refused", f"round channel: {count} refusal(s) from {source} since its last "
                               f"line, summarised (at most one line per {self._limit.interval:g} s)")

    def _accept_loop(self) -> None:
        sock = self._sock
        while not self._closed.is_set():
            try:
                conn, addr = sock.accept()
            except OSError:
                return  # closed
            where = f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) and len(addr) >= 2 else "?"
            with self._lock:
                victim = None
                if len(self._open) >= MAX_CONNECTIONS:
                    # a caller that never completes its handshake must not lock the coordinator out: the oldest
                    # connection still in its handshake makes room (it is refused and audited by its thread)
                    victim = next(iter(self._pending), None)
                    if victim is None or len(self._open) >= 2 * MAX_CONNECTIONS:
                        victim = False
                    else:
                        self._pending.pop(victim)
                        self._evicted.add(victim)
                        victim = self._open[victim]
                if victim is not False:
                    self._open[conn] = conn
                    if self.ctx is not None:
                        self._pending[conn] = conn
            if victim is False:
                conn.close()
                self._refuse("", CHANNEL, f"caller {where}: {MAX_CONNECTIONS} connections open, none in its "
                                          "handshake; connection closed", where)
                continue
            if victim is not None:
                _shutdown(victim)
            threading.Thread(target=self._client, args=(conn, addr), name="dpadmm-rounds-conn", daemon=True).start()

    # ---------------------------------------------------------------- one connection
    def _refuse(self, peer: str, method: str, detail: str, where: str = "?") -> None:
        """One audit record and one log line — summarised per caller address and kind (:mod:`.refusal_log`): a
        knocker's repeated refusals cost one line per interval, with their count."""
        source = where.rsplit(":", 1)[0]
        held = self._limit.admit(source, kind_of(method, detail.replace(where, "")))
        if held is None:
            return
        svc = self.service
        detail += held_note(held, source, self._limit.interval)
        svc.audit(peer, method, "refused", detail)
        if svc.echo is not None:
            svc.echo(f"refused {'a TLS handshake' if method == AUDIT_METHOD else 'a round-channel frame'}"
                     f"{' from ' + peer if peer else ''}: {detail}")

    def _client(self, conn: socket.socket, addr) -> None:
        where = f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) and len(addr) >= 2 else "?"
        sock = conn
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            peer = ""
            if self.ctx is not None:
                conn.settimeout(HANDSHAKE_TIMEOUT)
                try:
                    sock = self.ctx.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
                    with self._lock:  # from now on close() and an eviction shut the TLS socket down
                        self._open[conn] = sock
                        if conn in self._pending:
                            self._pending[conn] = sock
                    if self._closed.is_set() or conn in self._evicted:
                        raise ConnectionAbortedError("closed before its handshake")
                    sock.do_handshake()
                except (ssl.SSLError, OSError) as exc:  # another CA, no certificate, plaintext, too slow: on record
                    reason = (f"no handshake within {HANDSHAKE_TIMEOUT:g} s" if isinstance(exc, socket.timeout)
                              else str(exc) or type(exc).__name__)
                    if conn in self._evicted:
                        reason = (f"still in its handshake when the party had {MAX_CONNECTIONS} connections open "
                                  "(the oldest such makes room for a new caller)")
                    if not self._closed.is_set():
                        self._refuse("", AUDIT_METHOD, f"round channel, caller {where}: {reason}", where)
                    return
                with self._lock:
                    self._pending.pop(conn, None)
                peer = common_name(sock)
                if peer not in self.service.allow:  # the gRPC path's rule (handle checks it again per frame)
                    self._refuse(peer, AUDIT_METHOD, f"round channel, caller {where}: party {self.service.name!r} "
                                                     f"refuses caller {peer!r}: not on its allow list "
                                                     f"{list(self.service.allow)}", where)
                    return
                sock.settimeout(None)
            self._serve(sock, peer, where)
        except (OSError, ssl.SSLError):
            pass  # the caller went away (or the party is stopping): nothing to answer
        finally:
            with self._lock:
                self._open.pop(conn, None)
                self._pending.pop(conn, None)
                self._evicted.discard(conn)
            try:
                sock.close()
            except OSError:
                pass

    def _serve(self, sock, peer: str, where: str) -> None:
        while not self._closed.is_set():
            head = _recv_exactly(sock, HEADER.size)
            if len(head) < HEADER.size:
                if head:
                    self._refuse(peer, CHANNEL, f"caller {where}: a frame length cut short ({len(head)} of 4 bytes); "
                                                "connection closed", where)
                return  # a clean end between frames: the caller closed
            (n,) = HEADER.unpack(head)
            cap = min(int(getattr(self.service, "max_message", MAX_FRAME)), MAX_FRAME)  # --max-message-mb
            if not 0 < n <= cap:  # refused from its header, before any of it is read
                self._refuse(peer, CHANNEL, f"caller {where}: frame length {n} outside 1..{cap} bytes (the party's "
                                            "--max-message-mb); connection closed", where)
                return
            n_held = min(n, self._in_flight.limit)  # a cap raised after start still fits
            if not self._in_flight.acquire(n_held, self._closed):
                return  # the party stopped while the frame waited for its turn
            try:  # the frame's bytes count against the in-flight limit until they are dropped
                reply = self._receive_and_serve(sock, n, peer, where)
            finally:
                self._in_flight.release(n_held)
            if reply is None:
                return
            sock.sendall(HEADER.pack(len(reply)) + reply)

    def _receive_and_serve(self, sock, n: int, peer: str, where: str):
        """One frame's body of ``n`` bytes, served; its reply, or None when the connection is to be closed."""
        data = _recv_exactly(sock, n)
        if len(data) < n:
            if not self._closed.is_set():
                self._refuse(peer, CHANNEL, f"caller {where}: a frame cut short ({len(data)} of {n} bytes); "
                                            "connection closed", where)
            return None
        if self._closed.is_set():  # the party stopped while the frame came in: not served
            return None
        reply = serve_frame(self.service, data, peer)  # never raises; audits like the gRPC stream
        if n > TRIM_ABOVE:
            data = None
            release_memory()  # the large frame's memory goes back to the system (issue 36)
        return reply


def _shutdown(sock) -> None:
    """Shut a connection down from another thread (its own thread, woken from its read, closes it): the socket's
    ``shutdown(2)`` — not ``SSLSocket.shutdown``, which would drop the TLS object that thread is using."""
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


RECV_CHUNK = 1 << 20  # a frame longer than this is received in pieces of at most this size


def _recv_exactly(sock, n: int):
    """``n`` bytes from a blocking socket, or fewer if it ended first. Memory grows with what arrives, not with the
    declared length: a caller announcing a 1 GiB frame and sending 10 bytes costs the party 1 MiB, not 1 GiB."""
    if n > RECV_CHUNK:
        parts, got = [], 0
        while got < n:
            want = min(RECV_CHUNK, n - got)
            part = _recv_exactly(sock, want)
            parts.append(part)
            got += len(part)
            if len(part) < want:  # the caller stopped short
                break
        return b"".join(parts)
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if not k:
            return buf[:got]
        got += k
    return buf
