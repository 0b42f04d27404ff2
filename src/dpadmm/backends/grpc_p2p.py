"""Peer-to-peer consensus over mutual TLS: each node talks only to its graph neighbours.

[Zhang]'s M-ADMM is decentralised: node i needs, each round, ``S_i(t) = Σ_{j∈V_i} f_j(t)`` — the
broadcasts of its neighbours — and nothing else. With the routed gRPC backend those broadcasts
pass through the coordinator. Here they do not:

- every node runs ``dpadmm party serve --protocol graph-consensus --neighbour NAME=HOST:PORT …``;
  its operator lists its graph neighbours (names = certificate names, and their addresses);
- the coordinator only starts the run — ``Setup`` (the node's options; as for any party),
  ``Run`` (the number of rounds and the coordinator's view of the node's neighbours, which must be
  its operator's list) — polls each node's progress (``Poll``: round number, done) and ends it
  (``Finish``). When a node is done, its last ``Poll`` reports what the protocol declares and the
  node released anyway: its round messages (the broadcasts ``f_i(t)`` its neighbours received —
  public in [Zhang]'s threat model, covered by its guarantee), its own privacy events (what its
  ledger charged), its per-round seconds and, only when monitoring is allowed (non-private runs,
  or ``--allow-monitoring``), its per-round diagnostics;
- in round t a node steps with its own inbox ``S_i(t)`` (the sum of its neighbours' ``f_j(t)``,
  summed in neighbour-name order), sends its broadcast ``f_i(t+1)`` to each neighbour (method
  ``Exchange``, over mutual TLS with its own certificate, verifying the neighbour's) and waits for
  theirs. The step is the declared protocol step (:func:`dpadmm.algorithms.consensus.node.block_step`
  through :meth:`PartyService._step`: the party's own noise, budget and round cap apply);
- a node accepts ``Exchange`` only from a caller whose verified certificate name is on its
  operator's neighbour list, and only for itself (the message's sender must be the caller); anything
  else is refused (``PERMISSION_DENIED``) and written to its audit log. Coordinator methods still
  need a caller on ``--allow``.

The numbers equal the routed run's: the same step, the same inboxes (``A @ F`` row i is the sum
of the neighbours' rows), the same noise streams. Messages between nodes are the protocol's
declared ``f`` vectors only (what [Zhang]'s threat model already treats as public).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Mapping

import numpy as np

from ..exceptions import InvalidParameterError, PartyFailureError
from ..protocol import protocol_for
from ..runtime import codec
from .grpc_party import PartyService, _Refused
from .grpc_wire import CHANNEL_OPTIONS, METHODS, SERVICE

P2P_METHODS = ("Run", "Poll", "Exchange")


class NodeService(PartyService):
    """A consensus node that exchanges broadcasts with its neighbours directly."""

    methods = METHODS + P2P_METHODS

    def __init__(self, *, neighbours: Mapping[str, str], tls=None, exchange_timeout: float = 120.0, **kw):
        super().__init__(**kw)
        self.neighbours = dict(neighbours)
        if self.name in self.neighbours:
            raise InvalidParameterError(f"node {self.name!r} lists itself as a neighbour.")
        self.tls = tls
        self.exchange_timeout = float(exchange_timeout)
        self._inbox: dict[int, dict[str, np.ndarray]] = {}
        self._cond = threading.Condition()
        self._thread = None
        self._progress = {"round": 0, "done": False, "error": None}
        self._history: list[dict] = []
        self._released: list = []  # per round: (outbox, events, seconds) — what the node sent its neighbours
        self._stubs: dict[str, Any] = {}
        self._p2p_allowed = codec.allow_list()
        self._stop = threading.Event()

    # ------------------------------------------------------------------ dispatch
    def handle(self, method: str, payload: bytes, peer: str) -> bytes:
        if method != "Exchange":
            return super().handle(method, payload, peer)
        try:  # a neighbour's broadcast: no lock (the node's own loop is waiting for it)
            if self.secure and peer not in self.neighbours:
                raise _Refused(f"node {self.name!r} refuses a message from {peer!r}: not one of its neighbours "
                               f"{sorted(self.neighbours)}")
            try:
                msg = codec.decode(payload, allowed=self._p2p_allowed)
            except codec.DecodeError as exc:
                raise _Refused(f"node {self.name!r} {exc}", "INVALID_ARGUMENT") from None
            sender = msg.get("from") if isinstance(msg, dict) else None
            if sender not in self.neighbours or (self.secure and sender != peer):
                raise _Refused(f"node {self.name!r} refuses a message for {sender!r} from {peer!r} (a node speaks "
                               "only for itself, and only to its neighbours)")
            f = np.asarray(msg["f"], dtype=np.float64)
            with self._cond:
                self._inbox.setdefault(int(msg["round"]), {})[sender] = f
                self._cond.notify_all()
        except _Refused as exc:
            self.audit(peer, method, "refused", str(exc), nbytes=len(payload))
            if self.echo is not None:
                self.echo(f"refused Exchange from {peer or '(insecure)'}: {exc}")
            raise
        self.audit(peer, method, "ok", "", msg, nbytes=len(payload))
        return codec.encode({})

    # ------------------------------------------------------------------ coordinator methods
    def _run(self, req):
        self._need_setup("Run")
        if self.protocol.peer_to_peer is None:
            raise _Refused(f"node {self.name!r}: protocol {self.protocol.name!r} has no peer-to-peer form")
        if self._thread is not None and self._thread.is_alive():
            raise _Refused(f"node {self.name!r} is already running", "FAILED_PRECONDITION")
        rounds = int(req["rounds"])
        monitor = bool(req.get("monitor", False))
        if monitor and self.private and not self.allow_monitoring:
            raise _Refused(f"node {self.name!r} refused monitoring in a private run (its values are not noised); "
                           "its operator can opt in with --allow-monitoring")
        expected = req.get("neighbours")
        if expected is not None and sorted(map(str, expected)) != sorted(self.neighbours):
            raise _Refused(f"node {self.name!r} refused the run: the coordinator's graph gives it neighbours "
                           f"{sorted(map(str, expected))}, its operator listed {sorted(self.neighbours)} (--neighbour); "
                           "the two must agree", "FAILED_PRECONDITION")
        self._progress = {"round": 0, "done": False, "error": None}
        self._history = []
        self._released = []
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, args=(rounds, monitor), name="dpadmm-p2p", daemon=True)
        self._thread.start()
        return {"started": True, "neighbours": sorted(self.neighbours)}

    def _poll(self, req):
        out = dict(self._progress)
        if out["done"] and not out["error"]:
            out["history"] = list(self._history)
            out["outboxes"] = [o for o, _, _ in self._released]
            out["events"] = [list(e) for _, e, _ in self._released]
            out["seconds"] = [float(s) for _, _, s in self._released]
        return out

    # ------------------------------------------------------------------ the node's own loop
    def _stub(self, name: str):
        if name not in self._stubs:
            import grpc  # noqa: PLC0415 (heavy: imported when a node dials its neighbours)

            addr = self.neighbours[name]
            if self.tls is None:
                ch = grpc.insecure_channel(addr, options=CHANNEL_OPTIONS)
            else:
                creds = grpc.ssl_channel_credentials(root_certificates=self.tls.ca, private_key=self.tls.key,
                                                     certificate_chain=self.tls.cert)
                ch = grpc.secure_channel(addr, creds, options=CHANNEL_OPTIONS + [("grpc.ssl_target_name_override", name)])
            self._stubs[name] = (ch, ch.unary_unary(f"/{SERVICE}/Exchange"))
        return self._stubs[name][1]

    def _send(self, t: int, f: np.ndarray) -> None:
        payload = codec.encode({"from": self.name, "round": t, "f": f}, allowed=self._p2p_allowed)
        for name in sorted(self.neighbours):
            try:
                self._stub(name)(payload, timeout=self.exchange_timeout, wait_for_ready=True)
            except Exception as exc:
                details = exc.details() if hasattr(exc, "details") else str(exc)
                raise RuntimeError(f"node {self.name!r} could not send round {t} to neighbour {name!r} at "
                                   f"{self.neighbours[name]}: {details}") from None

    def _gather(self, t: int) -> np.ndarray:
        deadline = time.monotonic() + self.exchange_timeout
        with self._cond:
            while set(self._inbox.get(t, {})) != set(self.neighbours):
                if self._stop.is_set():
                    raise RuntimeError(f"node {self.name!r}: the run was ended while it waited for round {t}")
                left = min(deadline - time.monotonic(), 0.5)
                if deadline - time.monotonic() <= 0:
                    missing = sorted(set(self.neighbours) - set(self._inbox.get(t, {})))
                    raise RuntimeError(f"node {self.name!r}: no round-{t} message from neighbour(s) {missing} within "
                                       f"{self.exchange_timeout:g} s")
                self._cond.wait(left)
            got = self._inbox.pop(t)
        # neighbour-name order: deterministic. Unchecked here: huge broadcasts may overflow to ±inf (or NaN), which the
        # protocol's peer inbox puts in its public bounds before the node's step (gossip: node.peer_inbox)
        with np.errstate(over="ignore", invalid="ignore"):
            return sum(got[n] for n in sorted(got))

    def _loop(self, rounds: int, monitor: bool) -> None:
        try:
            if self.protocol.peer_to_peer is None:
                raise RuntimeError(f"protocol {self.protocol.name!r} declares no peer-to-peer exchange")
            inbox_of, broadcast_of = self.protocol.peer_to_peer
            S = None  # round 0: every broadcast f_j(0) is 0
            t0 = time.perf_counter()
            for t in range(rounds):
                with self.lock:
                    reply = self._step({"round": t, "inbox": inbox_of(self.cfg, self.state, t, S)})
                    diag = self.protocol.diagnose(self.cfg, self.state) if monitor else None
                self._send(t + 1, np.asarray(broadcast_of(reply["outbox"]), dtype=np.float64))
                S = self._gather(t + 1)
                self._released.append((reply["outbox"], reply["events"], time.perf_counter() - t0))
                if diag is not None:
                    self._history.append(diag)
                self._progress["round"] = t + 1
            self.audit("", "Run", "ok", f"{rounds} rounds with neighbours {sorted(self.neighbours)}")
        except Exception as exc:  # the coordinator sees it at its next Poll; the operator in the log
            self._progress["error"] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if not self._stop.is_set():
                self.audit("", "Run", "error", self._progress["error"])
                if self.echo is not None:
                    self.echo(f"run failed: {self._progress['error']}")
        finally:
            self._progress["done"] = True

    def _finish(self, req):
        self._end_loop()
        return super()._finish(req)

    def _end_loop(self):
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5.0)

    def close(self):
        self._end_loop()
        for ch, _ in self._stubs.values():
            ch.close()
        super().close()


# ---------------------------------------------------------------------- the coordinator's side
def run_nodes(backend, rounds: int, *, monitor: bool = False, neighbours=None, poll: float = 0.05,
              progress=None) -> dict[str, dict]:
    """Peer to peer (the parties set up by ``backend.start`` are ``--neighbour`` nodes): ``Run`` every node for
    ``rounds`` rounds — with ``neighbours`` (the run's graph, ``{node: [its neighbours]}``) each node checks its
    operator's list against it — then ``Poll`` until all are done. Returns each node's final report: its round
    messages (``outboxes``), privacy ``events`` and ``seconds`` per round, and its diagnostics (``history``)
    when ``monitor``. ``progress(round)`` is called with the slowest node's round while polling."""
    names = list(backend._specs)
    for name, spec in backend._specs.items():
        if protocol_for(spec).peer_to_peer is None:
            raise InvalidParameterError(f"protocol {protocol_for(spec).name!r} has no peer-to-peer form; "
                                        "run it without --peer-to-peer.")
    bodies = {n: {"rounds": int(rounds), "monitor": bool(monitor)} for n in names}
    if neighbours is not None:
        for n in names:
            bodies[n]["neighbours"] = sorted(map(str, neighbours.get(n, ())))
    backend._call_all(bodies, "Run", backend.timeout, "run")
    seen = 0
    while True:
        status = backend._call_all({n: {} for n in names}, "Poll", backend.timeout, "poll")
        failed = {n: s["error"] for n, s in status.items() if s.get("error")}
        if failed:
            backend._failed = True
            name, reason = sorted(failed.items())[0]
            exc = PartyFailureError(f"party {name!r} failed: {reason}")
            exc.party, exc.reason = name, reason
            exc.round = status[name].get("round")
            raise exc
        low = min(int(s.get("round", 0)) for s in status.values())
        if progress is not None and low > seen:
            progress(low)
            seen = low
        if all(s["done"] for s in status.values()):
            break
        time.sleep(poll)
    backend._rounds = int(rounds)
    return status


def run_p2p(backend, specs, rounds: int, *, noise_seed: int | None = None, monitor: bool = True,
            poll: float = 0.05, neighbours=None) -> dict:
    """Start a peer-to-peer consensus run on ``backend`` (a :class:`GrpcBackend` whose parties are
    :class:`NodeService` nodes): Setup, Run, poll until every node is done; return per-node diagnostics
    and the summed public objective per round. The coordinator sees no message while the run is on."""
    backend.start(specs, noise_seed=noise_seed, rounds=rounds)
    reports = backend.run_peer_to_peer(rounds, monitor=monitor, neighbours=neighbours, poll=poll)
    names = [s.name for s in specs]
    hist = {n: [{k: np.asarray(v).tolist() for k, v in d.items()} for d in reports[n]["history"]] for n in names}
    objective = ([float(sum(np.sum(hist[n][t]["node_objective"]) for n in names)) for t in range(int(rounds))]
                 if monitor else [])
    return {"nodes": hist, "objective": objective, "rounds": int(rounds), "reports": reports}
