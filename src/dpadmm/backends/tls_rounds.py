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
``Step`` is served (``serve_frame`` refuses other methods). A length of 0 or above ``MAX_MESSAGE`` (the
gRPC cap) is refused, audited and the connection closed; so is a frame cut short.

**Coordinator side** (:class:`RoundClient`, used by :class:`~dpadmm.backends.grpc_backend.GrpcBackend`
with ``round_transport="tls"``): one connection per party, with the coordinator's certificate, the
party's certificate verified against the CA and its name checked to be the party's expected name (the
gRPC channel's target-name override), opened at the first round on the backend's event loop.

``--insecure`` (local tests only): plain TCP with the same framing, no identities.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import ssl
import struct
import tempfile
import threading

from .grpc_party import MAX_MESSAGE
from .grpc_stream import frame, parse_reply, serve_frame

HEADER = struct.Struct(">I")
MAX_FRAME = MAX_MESSAGE  # the gRPC path's message cap
HANDSHAKE_TIMEOUT = 10.0  # seconds a caller has to complete TLS (then the socket is closed)
MAX_CONNECTIONS = 64  # open connections at once (a party serves one coordinator)
READ_LIMIT = 4 << 20  # the stream reader's buffer (a vertical round's frames are 260–520 kB)
AUDIT_METHOD = "(TLS handshake)"  # the method of the gRPC path's refused-handshake records
CHANNEL = "(round channel)"  # the method of a refused frame length


def _load_chain(ctx: ssl.SSLContext, tls) -> None:
    """Load the PEM certificate + key (held as bytes by ``TLSFiles``) into ``ctx``: ``ssl`` reads them only
    from files, so they go through a private (0700) temporary directory, removed at once."""
    d = tempfile.mkdtemp(prefix="dpadmm-tls-")
    try:
        cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
        for path, data in ((cert, tls.cert), (key, tls.key)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
        ctx.load_cert_chain(cert, key)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _context(tls, side) -> ssl.SSLContext:
    ctx = ssl.SSLContext(side)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2  # 1.3 is negotiated whenever both sides have it
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(cadata=tls.ca.decode("ascii"))  # the deployment's CA only (no system roots)
    _load_chain(ctx, tls)
    return ctx


def server_context(tls) -> ssl.SSLContext:
    """The party's side: its certificate, a client certificate of its CA required."""
    return _context(tls, ssl.PROTOCOL_TLS_SERVER)


def client_context(tls) -> ssl.SSLContext:
    """The coordinator's side: its certificate; the party's verified against the CA and (``server_hostname``)
    its name checked — ``PROTOCOL_TLS_CLIENT`` checks the host name against the certificate's SAN."""
    ctx = _context(tls, ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = True
    return ctx


def common_name(ssl_object) -> str:
    """The verified common name of the peer's certificate ('' if none) — as ``grpc_party.peer_name``."""
    cert = ssl_object.getpeercert() if ssl_object is not None else None
    for rdn in (cert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return value
    return ""


def parse_listen(value: str | None, listen: str) -> tuple[str, int] | None:
    """``--rounds-listen``: ``auto`` (the ``--listen`` host, a free port), ``off`` / None, or ``HOST:PORT``."""
    from ..exceptions import InvalidParameterError

    if value is None or value.strip().lower() == "off":
        return None
    value = value.strip()
    if value.lower() == "auto":
        return _host(listen.rsplit(":", 1)[0]), 0
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise InvalidParameterError(f"--rounds-listen must be auto, off or HOST:PORT (e.g. 0.0.0.0:7101), got {value!r}.")
    return _host(host), int(port)


def _host(host: str) -> str:
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


class RoundServer:
    """The party's round channel: serves ``Step`` frames to allowed callers (see the module's docstring)."""

    def __init__(self, service, tls=None):
        self.service = service
        self.ctx = server_context(tls) if tls is not None else None
        self._server = None
        self._open: set = set()  # transports of open connections
        self._tasks: set = set()  # their serving tasks
        self._loop = self._thread = None

    # ---------------------------------------------------------------- life cycle
    async def start(self, host: str, port: int) -> int:
        """Listen on ``host:port`` (0: a free port); set ``service.round_port`` (Hello advertises it); return it."""
        self._server = await asyncio.get_running_loop().create_server(lambda: _Gate(self), host, port)
        bound = self._server.sockets[0].getsockname()[1]
        self.service.round_port = bound
        return bound

    async def close(self) -> None:
        self.service.round_port = None  # Hello stops advertising it first
        if self._server is not None:
            self._server.close()
            for transport in list(self._open):
                transport.close()
            await self._server.wait_closed()
            self._server = None

    def start_in_thread(self, host: str, port: int) -> int:
        """For a threaded gRPC server (``grpc_party.make_server``): serve on an event loop of its own thread."""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="dpadmm-rounds", daemon=True)
        self._thread.start()
        return asyncio.run_coroutine_threadsafe(self.start(host, port), self._loop).result()

    def stop_thread(self) -> None:
        if self._loop is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self.close(), self._loop).result(5.0)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5.0)
            self._loop.close()
            self._loop = self._thread = None

    # ---------------------------------------------------------------- one connection
    def _refuse(self, peer: str, method: str, detail: str) -> None:
        svc = self.service
        svc.audit(peer, method, "refused", detail)
        if svc.echo is not None:
            svc.echo(f"refused {'a TLS handshake' if method == AUDIT_METHOD else 'a round-channel frame'}"
                     f"{' from ' + peer if peer else ''}: {detail}")

    async def _accept(self, transport) -> None:
        """A new connection (its transport paused since it was made: not one byte read outside TLS): the TLS
        handshake, the caller's name against the allow list, then its frames."""
        loop = asyncio.get_running_loop()
        addr = transport.get_extra_info("peername")
        where = f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) and len(addr) >= 2 else "?"
        if len(self._open) >= MAX_CONNECTIONS:
            transport.abort()
            return
        raw = transport
        self._open.add(raw)
        reader = asyncio.StreamReader(limit=READ_LIMIT)
        protocol = asyncio.StreamReaderProtocol(reader)
        try:
            peer = ""
            if self.ctx is not None:
                try:
                    transport = await loop.start_tls(transport, protocol, self.ctx, server_side=True,
                                                     ssl_handshake_timeout=HANDSHAKE_TIMEOUT)
                except Exception as exc:  # another CA, no certificate, plaintext, too slow: refused, on record
                    self._refuse("", AUDIT_METHOD, f"round channel, caller {where}: {str(exc) or type(exc).__name__}")
                    return
                self._open.add(transport)
                peer = common_name(transport.get_extra_info("ssl_object"))
                if peer not in self.service.allow:  # the gRPC path's rule (handle checks it again per frame)
                    self._refuse(peer, AUDIT_METHOD, f"round channel, caller {where}: party {self.service.name!r} "
                                                     f"refuses caller {peer!r}: not on its allow list "
                                                     f"{list(self.service.allow)}")
                    return
            else:
                transport.set_protocol(protocol)
                protocol.connection_made(transport)
                transport.resume_reading()
            writer = asyncio.StreamWriter(transport, protocol, reader, loop)
            await self._serve(reader, writer, peer, where)
        except (ConnectionError, OSError, asyncio.CancelledError):
            pass  # the caller went away (or the party is stopping): nothing to answer
        finally:
            self._open.discard(transport)
            self._open.discard(raw)
            transport.close()

    async def _serve(self, reader, writer, peer: str, where: str) -> None:
        while True:
            try:
                head = await reader.readexactly(HEADER.size)
            except asyncio.IncompleteReadError as exc:
                if exc.partial:
                    self._refuse(peer, CHANNEL, f"caller {where}: a frame length cut short ({len(exc.partial)} of 4 "
                                                "bytes); connection closed")
                return  # a clean end between frames: the caller closed
            (n,) = HEADER.unpack(head)
            if not 0 < n <= MAX_FRAME:
                self._refuse(peer, CHANNEL, f"caller {where}: frame length {n} outside 1..{MAX_FRAME} bytes; "
                                            "connection closed")
                return
            try:
                data = await reader.readexactly(n)
            except asyncio.IncompleteReadError as exc:
                self._refuse(peer, CHANNEL, f"caller {where}: a frame cut short ({len(exc.partial)} of {n} bytes); "
                                            "connection closed")
                return
            reply = serve_frame(self.service, data, peer)  # never raises; audits like the gRPC stream
            writer.write(HEADER.pack(len(reply)) + reply)
            await writer.drain()


class _Gate(asyncio.Protocol):
    """Holds a new connection's bytes back (``pause_reading`` as it is made) until its TLS handshake starts."""

    def __init__(self, server: RoundServer):
        self.server = server

    def connection_made(self, transport):
        transport.pause_reading()
        task = asyncio.ensure_future(self.server._accept(transport))
        self.server._tasks.add(task)
        task.add_done_callback(self.server._tasks.discard)


class RoundClient:
    """The coordinator's connection to one party's round channel (on the backend's event loop)."""

    def __init__(self, reader, writer):
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, host: str, port: int, name: str, ctx: ssl.SSLContext | None, timeout: float) -> "RoundClient":
        """Connect (raises ``ssl.SSLError`` / ``ssl.CertificateError`` for a party whose certificate is not
        ``name``'s from the CA, ``OSError`` / ``asyncio.TimeoutError`` for an unreachable port)."""
        reader, writer = await asyncio.wait_for(asyncio.open_connection(
            _host(host), port, ssl=ctx, server_hostname=name if ctx is not None else None, limit=READ_LIMIT),
            timeout)
        return cls(reader, writer)

    async def call(self, method: str, payload: bytes) -> bytes:
        """One request frame and its reply's message (``StreamError`` for a refusal or an error)."""
        data = frame(method, payload)
        self.writer.write(HEADER.pack(len(data)) + data)
        (n,) = HEADER.unpack(await self.reader.readexactly(HEADER.size))
        if not 0 < n <= MAX_FRAME:
            raise ValueError(f"a reply frame of length {n}")
        return parse_reply(await self.reader.readexactly(n))

    def close(self) -> None:
        try:
            self.writer.close()
        except Exception:
            pass
