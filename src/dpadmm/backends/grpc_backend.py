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

import os

os.environ.setdefault("GRPC_VERBOSITY", "NONE")  # errors reach the user as one line of ours, not gRPC's C-core log
import time
from typing import Any, Mapping, Sequence

from ..exceptions import InvalidParameterError, PartyFailureError, ProtocolError
from ..protocol import protocol_for, request_arguments, require_served, setup_fields
from ..runtime import codec
from .base import Backend, PartySpec
from .grpc_calls import (  # noqa: F401 (re-exported: their old home)
    STREAM_MAX_BYTES, GrpcCalls, _broadcast_key, _failure, _import_grpc, _Malformed, parse_peers,
)
from .grpc_p2p import run_nodes


class GrpcBackend(GrpcCalls, Backend):
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
        protos = {s.name: require_served(protocol_for(s)) for s in specs}
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
            setup = setup_fields(proto, spec.setup)  # by name: the protocol's Setup record's fields
            try:
                codec.encode(setup, allowed=self._allowed[spec.name])
            except TypeError as exc:
                raise InvalidParameterError(f"party {spec.name!r}'s setup cannot be sent as data ({exc}); its data must "
                                            "be a PartyData reference read by the party.") from None
            bodies[spec.name] = {"protocol": proto.name, "party": spec.name, "index": index,
                                 "noise_seed": None if noise_seed is None else int(noise_seed),
                                 "setup": setup}
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
        fn = protocol_for(self._specs[name]).handlers.get(handler) if isinstance(handler, str) else None
        body = {"handler": handler, "arguments": request_arguments(fn, args)}  # by name: the handler's parameters
        return self._call(name, "Request", body, self.timeout,
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
