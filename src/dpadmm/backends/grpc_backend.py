"""The gRPC backend: parties in different organisations, mutual TLS, protocol messages only.

Topology (firewalls): every party runs ``dpadmm party serve`` and **listens**; the coordinator **dials**
each party (outbound access only). A party listens on two ports, both opened to the coordinator's address
only: its gRPC port (one long-lived HTTP/2 connection: Hello, Setup, requests, checkpoints, Finish as
unary RPCs) and its round channel (``--rounds-listen``, :mod:`tls_rounds`: a raw mutual-TLS socket with the
same certificates, CA, names and allow list, about a third of gRPC's per-message cost), where the
coordinator sends the rounds' Step frames (``round_transport="tls"``, the default). A party without a round
channel (``--rounds-listen off``, or a port this side cannot reach) gets them as frames on one persistent gRPC
stream (:mod:`grpc_stream`) — no per-round connection set-up either way.

Identity: the coordinator connects to party ``NAME`` at ``HOST:PORT`` and TLS accepts only a
server certificate issued by the trusted CA *for* ``NAME`` (SAN DNS:NAME); the party accepts the
call only from a client certificate of its CA whose common name is on its allow list. A wrong CA
or name fails the handshake, reported as one line naming the party.

What crosses the wire is the protocol the party declared (:mod:`dpadmm.protocol`) in
the array/scalar encoding of :mod:`dpadmm.backends.grpc_codec`: the setup options (as data; the
party reads its own file), the round's inbox and outbox with the privacy events, declared
requests (e.g. ``score``), and — only when monitoring is on and the party agrees — diagnostics.
The party's state, model and checkpoints stay at the party; :meth:`checkpoint` asks each party
to write its own, and ``close`` asks it to write its final model to its own directory.

Failures surface as :class:`~dpadmm.exceptions.PartyFailureError` naming the party (the engine
adds the round): unreachable or dead (``UNAVAILABLE``), hanging (no answer within ``timeout``),
a failed handshake (bad certificate), or an exception in the party's step. A refusal by the party
(undeclared request, monitoring in a private run, wrong protocol) is a
:class:`~dpadmm.exceptions.ProtocolError`.
"""

from __future__ import annotations

import dataclasses
import os

os.environ.setdefault("GRPC_VERBOSITY", "NONE")  # errors reach the user as one line of ours, not gRPC's C-core log
import time
from typing import Any, Mapping, Sequence

from ..exceptions import InvalidParameterError, MissingDependencyError, PartyFailureError, ProtocolError
from . import grpc_codec as codec
from .base import Backend, PartySpec
from .grpc_party import CHANNEL_OPTIONS, MAX_MESSAGE, METHODS, SERVICE
from .grpc_stream import STREAM_METHOD, STREAMED, StreamError, frame, parse_reply
from ..protocol import protocol_of


def _import_grpc():
    try:
        import grpc  # noqa: F401
    except ImportError:  # pragma: no cover - grpcio is a dependency
        raise MissingDependencyError("the grpc backend needs grpcio: pip install 'grpcio>=1.60'.") from None
    return grpc


def parse_peers(items) -> dict[str, str]:
    """``["party1=host:port", ...]`` (or one comma-separated string) → ``{"party1": "host:port"}``."""
    if isinstance(items, str):
        items = [items]
    out: dict[str, str] = {}
    for item in items or []:
        for part in str(item).split(","):
            part = part.strip()
            if not part:
                continue
            if "=" not in part or not part.split("=", 1)[1].strip().rsplit(":", 1)[-1].isdigit():
                raise InvalidParameterError(f"--peer must look like NAME=HOST:PORT (e.g. party1=10.0.0.5:7001), "
                                            f"got {part!r}.")
            name, addr = (s.strip() for s in part.split("=", 1))
            if name in out:
                raise InvalidParameterError(f"--peer {name} is given twice.")
            out[name] = addr
    return out


STREAM_MAX_BYTES = MAX_MESSAGE  # every round's message travels on the party's stream (its window: STREAM_WINDOW)


class _Malformed:
    """A reply that did not decode (the party is reported as failed, naming the reason)."""

    def __init__(self, error: Exception):
        self.error = error


def _broadcast_key(inbox) -> tuple:
    """Equal for two inboxes that encode to the same bytes: the same object, or the same declared message type
    whose fields are the same array objects and equal exact scalars (a hub that builds one message per party
    around one broadcast array). Only compared within one round, while every inbox is alive (ids are unique)."""
    if isinstance(inbox, tuple) and hasattr(type(inbox), "_fields"):
        values = tuple(inbox)
    elif dataclasses.is_dataclass(inbox) and not isinstance(inbox, type):
        values = tuple(getattr(inbox, f.name) for f in dataclasses.fields(inbox))
    else:
        return ("id", id(inbox))
    parts = []
    for v in values:
        t = type(v)
        if t is float:
            parts.append((t, v.hex()))  # exact, and -0.0 differs from 0.0
        elif v is None or t in (bool, int, str):
            parts.append((t, v))
        else:  # arrays and anything else: the same object
            parts.append(("id", id(v)))
    return (type(inbox), tuple(parts))


def _failure(name: str, reason: str) -> PartyFailureError:
    exc = PartyFailureError(f"party {name!r} failed: {reason}")
    exc.party, exc.reason, exc.round = name, reason, None
    return exc


class GrpcBackend(Backend):
    """Parties are remote ``dpadmm party serve`` processes reached over mutual TLS.

    Parameters
    ----------
    peers : ``{party name: "HOST:PORT"}`` — one per party spec, in any order.
    tls : :class:`~dpadmm.backends.grpc_tls.TLSFiles` of the coordinator (certificate, key, CA).
    insecure : plaintext without identities (local tests only); exactly one of ``tls``/``insecure``.
    timeout : seconds a party may take to answer one call (> 0).
    setup_timeout : seconds for a party's setup (reading and factorising its data); default max(timeout, 300).
    stream : send the rounds' messages on one persistent bidirectional stream per party (:mod:`grpc_stream`;
        default) rather than one unary call per round (its HTTP/2 window is large enough for a round's N-vectors:
        ``grpc_party.STREAM_WINDOW``).
    connect_timeout : seconds to wait for a party to come up before the run fails (default 5: an unreachable
        party is reported within seconds; raise it when parties are started together with the coordinator).
    round_transport : ``"tls"`` (default): the rounds' Step frames on the party's raw mutual-TLS round channel
        (:mod:`tls_rounds`) when its Hello announces one, else on its gRPC stream; ``"grpc"``: always on the gRPC
        stream. (Measured faster: BENCHMARKS.md "A raw mutual-TLS round channel".) ``round_transport_`` then says
        which each party's rounds used ("tls": the round channel — plain TCP with ``insecure``; "grpc": fell back).
    peer_to_peer : the parties are consensus nodes started with ``--neighbour`` (:mod:`grpc_p2p`): they
        exchange their round messages with their graph neighbours directly; this side only sets the run up,
        starts it (:meth:`run_peer_to_peer`), polls it and ends it — the engine then never calls :meth:`step`.
    """

    name = "grpc"
    models_stay_at_parties = True  # a party's model is never requested (it writes it to its own directory)

    def __init__(self, peers: Mapping[str, str], *, tls=None, insecure: bool = False, timeout: float = 120.0,
                 setup_timeout: float | None = None, connect_timeout: float = 5.0, stream: bool = True,
                 peer_to_peer: bool = False, round_transport: str = "tls") -> None:
        if not (isinstance(timeout, (int, float)) and timeout > 0):
            raise InvalidParameterError(f"timeout must be a positive number of seconds, got timeout={timeout!r}.")
        if (tls is None) == (not insecure):
            raise InvalidParameterError("the grpc backend needs mutual TLS (--tls DIR or --cert/--key/--ca) or, for a "
                                        "local test only, --insecure.")
        self.peers = dict(peers)
        if not self.peers:
            raise InvalidParameterError("the grpc backend needs the parties' addresses: --peer NAME=HOST:PORT per party.")
        self.tls = tls
        self.insecure = bool(insecure)
        self.timeout = float(timeout)
        self.setup_timeout = float(setup_timeout) if setup_timeout is not None else max(self.timeout, 300.0)
        self.connect_timeout = float(connect_timeout)
        self._channels: dict[str, Any] = {}
        self._loop = self._thread = None
        self._calls: dict[str, dict[str, Any]] = {}
        self._specs: dict[str, PartySpec] = {}
        self._allowed: dict[str, dict] = {}
        self.hello_: dict[str, dict] = {}
        self._failed = False
        self._dead: set[str] = set()
        self._rounds = 0
        self.stream = bool(stream)
        self._streams: dict[str, Any] = {}
        self.peer_to_peer = bool(peer_to_peer)
        if round_transport not in ("tls", "grpc"):
            raise InvalidParameterError(f"round_transport must be 'tls' or 'grpc', got {round_transport!r}.")
        self.round_transport = round_transport
        self._rounds_off: set[str] = set()
        self._rconns: dict[str, Any] = {}  # party → tls_rounds.RoundClient (opened at its first round)
        self._rctx = None
        self.round_transport_: dict[str, str] = {}

    # ------------------------------------------------------------------ plumbing
    def _run(self, coro):
        """Run ``coro`` on the backend's event-loop thread (gRPC asyncio: concurrent calls to all parties
        from one thread — about half the per-call cost of thread-backed futures) and wait for it."""
        import asyncio
        import threading

        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever, name="dpadmm-grpc", daemon=True)
            self._thread.start()
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _submit(self, coro):
        """Start ``coro`` on the backend's event-loop thread; returns its concurrent future."""
        import asyncio

        self._run(asyncio.sleep(0))  # the loop, started if need be
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def _channel(self, name: str):
        grpc = _import_grpc()
        if name not in self.peers:
            raise InvalidParameterError(f"no address for party {name!r}; pass --peer {name}=HOST:PORT "
                                        f"(known: {sorted(self.peers)}).")
        if name not in self._channels:
            addr = self.peers[name]

            async def make():
                if self.insecure:
                    return grpc.aio.insecure_channel(addr, options=CHANNEL_OPTIONS)
                creds = grpc.ssl_channel_credentials(root_certificates=self.tls.ca, private_key=self.tls.key,
                                                     certificate_chain=self.tls.cert)
                # TLS checks that the party's certificate was issued for NAME (not for the host's address)
                return grpc.aio.secure_channel(addr, creds,
                                               options=CHANNEL_OPTIONS + [("grpc.ssl_target_name_override", name)])

            ch = self._run(make())
            self._channels[name] = ch
            self._calls[name] = {m: ch.unary_unary(f"/{SERVICE}/{m}") for m in (*METHODS, "Run", "Poll")}  # + p2p
        return self._calls[name]

    def _error(self, name: str, what: str, err, timeout: float) -> Exception:
        grpc = _import_grpc()
        code = err.code() if hasattr(err, "code") else None
        details = (err.details() if hasattr(err, "details") else str(err)) or ""
        debug = err.debug_error_string() if hasattr(err, "debug_error_string") else ""
        text = f"{details} {debug}".lower()
        addr = self.peers.get(name, "?")
        if code in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.INVALID_ARGUMENT,
                    grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.UNIMPLEMENTED):
            msg = details if details.startswith("party") else f"party {name!r} refused {what}: {details}"
            exc = ProtocolError(msg)
            exc.party = name
            return exc
        self._failed = True  # a failed run: parties write no final model
        self._dead.add(name)
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return _failure(name, f"no answer to {what} within timeout={timeout:g} s from {addr}; the party may hang "
                                  "or be unreachable — raise --timeout if its step is legitimately slow.")
        if code == grpc.StatusCode.UNAVAILABLE:
            refused_tls = what == "Hello" and not self.insecure and "socket closed" in text  # closed before any call
            if refused_tls or any(k in text for k in ("handshake", "ssl", "certificate", "tsi_", "alert", "verification",
                                                      "unauthenticated")):
                return _failure(name, f"TLS handshake with {addr} failed (mutual TLS refused: a certificate not issued "
                                      f"for {name!r} by the CA this side trusts, or ours not trusted by it).")
            return _failure(name, f"unreachable at {addr} during {what} (connection refused or lost: is `dpadmm party "
                                  "serve` running there?); restart it and resume from the last checkpoint.")
        first = details.splitlines()[0] if details else str(code)
        return _failure(name, f"{first} (during {what})")

    def _drop_stream(self, name: str) -> None:
        call = self._streams.pop(name, None)
        if call is not None:
            call.cancel()

    async def _on_stream(self, name: str, method: str, payload: bytes) -> bytes:
        """One request frame on party ``name``'s persistent stream (opened at its first round) and its reply
        (the caller bounds the round's time)."""
        grpc = _import_grpc()
        call = self._streams.get(name)
        if call is None:
            call = self._channels[name].stream_stream(f"/{SERVICE}/{STREAM_METHOD}")()
            self._streams[name] = call
        try:
            await call.write(frame(method, payload))
            data = await call.read()
        except Exception:
            self._streams.pop(name, None)
            raise
        if data is grpc.aio.EOF:
            self._streams.pop(name, None)
            code = await call.code()
            raise StreamError(code.name if code != grpc.StatusCode.OK else "UNAVAILABLE",
                              (await call.details()) or "the party closed its stream")
        return parse_reply(data)

    def _close_streams(self) -> None:
        for call in self._streams.values():
            try:
                self._loop.call_soon_threadsafe(call.cancel)
            except Exception:
                pass
        for conn in self._rconns.values():
            conn.close()
        self._streams, self._rconns = {}, {}

    def _tls_rounds(self, name: str) -> bool:
        """Party ``name``'s rounds go on its raw TLS round channel (it announced one, and it was reachable)."""
        return (self.round_transport == "tls" and name not in self._rounds_off
                and isinstance((self.hello_.get(name) or {}).get("rounds"), dict))

    def _drop_rounds(self, name: str) -> None:
        conn = self._rconns.pop(name, None)
        if conn is not None:
            conn.close()

    def _open_rounds(self, names, timeout: float) -> None:
        """Connect to the round channel (:mod:`tls_rounds`) of each party in ``names`` (at its first round). A
        certificate that is not the party's (or a party that refuses ours) fails the run, as on gRPC; an
        unreachable round port sends that party's rounds to its gRPC stream instead (with a warning)."""
        import ssl
        import warnings

        from .tls_rounds import RoundClient, client_context

        if not self.insecure and self._rctx is None:
            self._rctx = client_context(self.tls)
        for name in names:
            host, port = self.peers[name].rsplit(":", 1)[0], self.hello_[name]["rounds"].get("port")
            try:
                self._rconns[name] = RoundClient.open(host, int(port), name, self._rctx,
                                                      min(self.connect_timeout, timeout))
            except ssl.SSLError as exc:  # incl. a certificate not issued for `name` by the CA: never a fallback
                raise self._error(name, "step", StreamError("UNAVAILABLE", f"TLS handshake on the round channel "
                                                                           f"failed ({exc})"), timeout) from None
            except (OSError, TypeError, ValueError) as exc:
                self._rounds_off.add(name)
                self.round_transport_[name] = "grpc"
                warnings.warn(f"party {name!r}'s round channel at {host}:{port} is unreachable from here "
                              f"({type(exc).__name__}: {exc}); its rounds go on its gRPC stream (open that port to "
                              "this side, or start the party with --rounds-listen off).", RuntimeWarning, stacklevel=4)
                continue
            self.round_transport_[name] = "tls"

    def _call(self, name: str, method: str, body: dict, timeout: float, what: str | None = None):
        return self._call_all({name: body}, method, timeout, what or method)[name]

    def _call_all(self, bodies: Mapping[str, dict], method: str, timeout: float, what: str) -> dict[str, Any]:
        """Send one call per party concurrently; decode the replies; raise the first failure (all replies
        are collected first, so the parties stay in step)."""
        import asyncio

        calls = {name: self._channel(name)[method] for name in bodies}
        payloads, once = {}, {}
        for name, body in bodies.items():
            allowed = self._allowed.get(name) or codec.allow_list()
            # a round's broadcast (the same message for every party: one object, e.g. vertical sharing's s̃ − z, or
            # one message per party around the same arrays) is encoded once per protocol, not once per party
            key = ((_broadcast_key(body["inbox"]), body.get("round"), id(allowed))
                   if method == "Step" and isinstance(body, dict) and set(body) == {"round", "inbox"} else None)
            if key is not None and key in once:
                payloads[name] = once[key]
                continue
            payloads[name] = codec.encode(body, allowed=allowed)
            if key is not None:
                once[key] = payloads[name]

        # the rounds' messages: one frame each way on the party's stream (a unary call per round with stream=False)
        on_stream = {n: self.stream and method in STREAMED and len(payloads[n]) <= STREAM_MAX_BYTES for n in bodies}
        # ... or on its raw TLS round channel (tls_rounds: connected at its first round, driven from this thread)
        if any(on_stream.values()) and self.round_transport == "tls":
            fresh = [n for n in bodies if on_stream[n] and n not in self._rconns and self._tls_rounds(n)]
            if fresh:
                self._open_rounds(fresh, timeout)
        on_tls = [n for n in bodies if on_stream[n] and n in self._rconns]
        others = [n for n in bodies if n not in on_tls]

        def decode(n, data):
            try:
                return codec.decode(data, allowed=self._allowed.get(n) or codec.allow_list())
            except codec.DecodeError as err:
                return _Malformed(err)

        async def one(n):
            """Party ``n``'s reply, decoded as soon as it arrives (while other parties are still answering)."""
            data = await (self._on_stream(n, method, payloads[n]) if on_stream[n]
                          else calls[n](payloads[n], timeout=timeout))
            return decode(n, data)

        async def gather():
            if any(on_stream[n] for n in others):  # one deadline for the round (per-party timers cost more)
                tasks = [asyncio.ensure_future(one(n)) for n in others]
                done, pending = await asyncio.wait(tasks, timeout=timeout)
                out = []
                for n, task in zip(others, tasks):
                    if task in pending:
                        task.cancel()
                        self._drop_stream(n)
                        out.append(StreamError("DEADLINE_EXCEEDED", "no answer on the stream"))
                    else:
                        out.append(task.exception() or task.result())
                return out
            return await asyncio.gather(*[one(n) for n in others], return_exceptions=True)

        got: dict[str, Any] = {}
        pending = self._submit(gather()) if others else None  # the gRPC parties on the event loop, meanwhile ...
        if on_tls:  # ... the round channels from this thread: one select loop, replies decoded as they arrive
            from .grpc_stream import frame
            from .tls_rounds import exchange

            conns = {n: self._rconns[n] for n in on_tls}
            got.update(exchange(conns, {n: frame(method, payloads[n]) for n in on_tls}, timeout, on_reply=decode))
            for n in on_tls:
                if conns[n].broken:  # lost, out of step after a deadline, or malformed: a new connection next time
                    self._drop_rounds(n)
        if pending is not None:
            got.update(zip(others, pending.result()))
        out, error = {}, None
        for name, reply in ((n, got[n]) for n in bodies):
            if isinstance(reply, _Malformed):
                error = error or _failure(name, f"sent a malformed reply to {what}: {reply.error}")
            elif isinstance(reply, BaseException):  # grpc.aio.AioRpcError, StreamError
                error = error or self._error(name, what, reply, timeout)
            else:
                out[name] = reply
        if error is not None:
            raise error
        return out

    # ------------------------------------------------------------------ discovery
    def hello(self, names: Sequence[str] | None = None) -> dict[str, dict]:
        """Contact every party (waiting up to ``connect_timeout`` for it to come up); return what each
        declares: its name, protocol, requests, and public facts about its data (e.g. column counts)."""
        names = list(names or self.peers)
        for name in names:
            deadline = time.monotonic() + self.connect_timeout
            while True:
                try:
                    left = deadline - time.monotonic()
                    reply = self._call(name, "Hello", {}, timeout=max(1.0, min(self.timeout, 10.0, left)), what="Hello")
                    break
                except PartyFailureError as exc:
                    if not ("unreachable" in str(exc) or "no answer" in str(exc)) or time.monotonic() > deadline:
                        if "unreachable" in str(exc) or "no answer" in str(exc):
                            raise _failure(name, f"unreachable at {self.peers[name]}: no answer to Hello within "
                                                 f"{self.connect_timeout:g} s (is `dpadmm party serve` running there, "
                                                 "and is its port open to this side?)") from None
                        raise
                    time.sleep(0.2)
            if reply.get("name") != name:
                raise ProtocolError(f"party at {self.peers[name]} says it is {reply.get('name')!r}, not {name!r}.")
            self.hello_[name] = reply
        self._failed = False
        return {n: self.hello_[n] for n in names}

    # ------------------------------------------------------------------ Backend interface
    def start(self, specs: Sequence[PartySpec], *, noise_seed: int | None = None, rounds: int | None = None) -> None:
        """Check every party serves the spec's protocol, then send each its setup options (as data) and the
        run's declared number of ``rounds`` (a budgeted party prices the whole run at Setup)."""
        self._specs = {s.name: s for s in specs}
        self._failed = False
        if self._streams or self._rconns:  # a new run: fresh streams (a restarted party's old stream is gone)
            self._close_streams()
        protos = {s.name: protocol_of(s.step) for s in specs}
        missing = [s.name for s in specs if s.name not in self.hello_]
        if missing:
            self.hello(missing)
        bodies, lists = {}, {}
        for index, spec in enumerate(specs):
            proto = protos[spec.name]
            served = self.hello_[spec.name].get("protocols") or [self.hello_[spec.name].get("protocol")]
            if proto.name not in served:
                raise ProtocolError(f"party {spec.name!r} serves protocol {served}, but this run needs {proto.name!r}; "
                                    f"restart it with --protocol {proto.name}.")
            if proto.name not in lists:  # one allow list per protocol (shared by its parties)
                lists[proto.name] = codec.allow_list(proto.types)
            self._allowed[spec.name] = lists[proto.name]
            try:
                codec.encode(list(spec.setup_args), allowed=self._allowed[spec.name])
            except TypeError as exc:
                raise InvalidParameterError(f"party {spec.name!r}'s setup cannot be sent as data ({exc}); its data must "
                                            "be a PartyData reference read by the party.") from None
            bodies[spec.name] = {"protocol": proto.name, "party": spec.name, "index": index,
                                 "noise_seed": None if noise_seed is None else int(noise_seed),
                                 "args": list(spec.setup_args)}
            if rounds is not None:
                bodies[spec.name]["rounds"] = int(rounds)
        self.setup_ = self._call_all(bodies, "Setup", self.setup_timeout, "setup")

    def require_protocol(self, protocol: str, names: Sequence[str], why: str = "") -> None:
        """Before a run: every party in ``names`` serves ``protocol`` (its Hello), else one clear error."""
        missing = [n for n in names if n not in self.hello_]
        if missing:
            self.hello(missing)
        lacking = [n for n in names if protocol not in (self.hello_[n].get("protocols") or [self.hello_[n].get("protocol")])]
        if lacking:
            raise ProtocolError(f"part{'ies' if len(lacking) > 1 else 'y'} {', '.join(map(repr, lacking))} do"
                                f"{'' if len(lacking) > 1 else 'es'} not serve protocol {protocol!r}{why}; restart "
                                f"{'them' if len(lacking) > 1 else 'it'} with --protocol {protocol} added.")

    def routed(self) -> "GrpcBackend":
        """A backend to the same parties with the same identity and timeouts whose rounds go through this side
        (e.g. a protocol without a peer-to-peer form after a peer-to-peer run)."""
        return GrpcBackend(self.peers, tls=self.tls, insecure=self.insecure, timeout=self.timeout,
                           setup_timeout=self.setup_timeout, connect_timeout=self.connect_timeout, stream=self.stream,
                           round_transport=self.round_transport)

    def run_peer_to_peer(self, rounds: int, *, monitor: bool = False, neighbours: Mapping[str, Sequence[str]] | None = None,
                         poll: float = 0.05, progress=None) -> dict[str, dict]:
        """Peer to peer: ``Run`` every node set up by :meth:`start`, poll until all are done, return their final
        reports (:func:`dpadmm.backends.grpc_p2p.run_nodes`)."""
        from .grpc_p2p import run_nodes

        return run_nodes(self, rounds, monitor=monitor, neighbours=neighbours, poll=poll, progress=progress)

    def step(self, inboxes: Mapping[str, Any], round_: int) -> dict[str, tuple[Any, list]]:
        replies = self._call_all({n: {"round": int(round_), "inbox": inboxes[n]} for n in self._specs}, "Step",
                                 self.timeout, "step")
        self._rounds = int(round_) + 1
        return {n: (r["outbox"], r["events"]) for n, r in replies.items()}

    def diagnose(self) -> dict[str, dict]:
        names = [n for n, s in self._specs.items() if s.diagnose is not None]
        replies = self._call_all({n: {} for n in names}, "Diagnose", self.timeout, "diagnose")
        return {n: r["value"] for n, r in replies.items()}

    def request(self, name: str, handler: str, *args) -> Any:
        if name not in self._specs:
            raise InvalidParameterError(f"no party {name!r} in this run.")
        return self._call(name, "Request", {"handler": handler, "args": list(args)}, self.timeout,
                          what=f"request {handler!r}")["value"]

    def checkpoint(self, directory, round_: int) -> None:
        """Every party writes its own state in its own directory (``directory`` is the coordinator's)."""
        self._call_all({n: {"round": int(round_)} for n in self._specs}, "Checkpoint", self.timeout, "checkpoint")

    def restore(self, directory, round_: int) -> dict[str, list]:
        """Every party restores its own checkpoint; returns, per party, the releases its run made after the
        checkpoint (before the crash) — released again by the resumed run, so the report counts them."""
        replies = self._call_all({n: {"round": int(round_)} for n in self._specs}, "Restore", self.timeout, "restore")
        return {n: list(r.get("released_again") or []) for n, r in replies.items()}

    @property
    def collects_models(self) -> bool:
        return False

    def close(self) -> None:
        """Tell every party the run is over (a completed run: it writes its final model to its own
        directory; a failed one: it writes nothing), then close the connections."""
        for name in list(self._specs):
            if name in self._dead:
                continue
            try:
                self._call(name, "Finish", {"completed": not self._failed and self._rounds > 0},
                           timeout=min(self.timeout, 5.0))
            except Exception:
                pass
        if self._streams or self._rconns:
            self._close_streams()
        for ch in self._channels.values():
            try:
                self._run(ch.close())
            except Exception:
                pass
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5.0)
            self._loop.close()
            self._loop = self._thread = None
        self._channels, self._calls, self._specs = {}, {}, {}
        self._dead = set()
