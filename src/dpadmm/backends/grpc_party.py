"""A party in its own organisation: a gRPC server that serves one declared protocol over mutual TLS.

``dpadmm party serve`` runs :func:`serve`. The party

- listens on one port (the coordinator dials it; the party needs no outbound access) and accepts
  a call only over mutual TLS from a client certificate issued by the CA it trusts whose common
  name is on its allow list (``--allow coordinator``); ``--insecure`` (plaintext, no identities)
  exists for local tests only;
- serves exactly the protocol it was started for (``--protocol vertical-sharing``): ``Hello``,
  ``Setup`` (options as data; it reads its *own* files, given at start-up as ``--data KEY=FILE``,
  and factorises once), ``Step``, the protocol's declared ``Request`` handlers (e.g. ``score``),
  ``Diagnose`` (monitoring — refused in a private run unless started with ``--allow-monitoring``),
  ``Checkpoint``/``Restore`` (its own state, in its own directory) and ``Finish`` (it writes its
  final local model to its own directory; the model never leaves the party);
- refuses anything else with a clear error on both sides: a pickle or any non-dpadmm encoding,
  an undeclared type, an unknown method (gRPC ``UNIMPLEMENTED``), an undeclared request such as
  the model;
- draws its noise from its own OS entropy (unless the coordinator asks for a seeded simulation,
  which the run's report then says);
- appends one JSON line per call to ``OUT/audit.jsonl``: time, caller, method, status, and the
  names, shapes, dtypes and byte sizes of what it was sent and what it answered — never values;
- with ``--max-epsilon E --delta D`` enforces its *own* privacy budget (:class:`PartyBudget`),
  whatever the coordinator's setup options say: every release it makes is recorded in
  ``OUT/privacy_ledger.json`` (across runs: a budget per dataset, not per run), and a step whose
  release would bring the composed total above E at δ = D is refused before anything is sent.
"""

from __future__ import annotations

import os

os.environ.setdefault("GRPC_VERBOSITY", "NONE")  # errors reach the user as one line of ours, not gRPC's C-core log
import datetime
import json
import math
import tempfile
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from . import grpc_codec as codec
from ..protocol import PartyData, Protocol

SERVICE = "dpadmm.Party"
METHODS = ("Hello", "Setup", "Step", "Request", "Diagnose", "Checkpoint", "Restore", "Finish")
WIRE_VERSION = 1
MAX_MESSAGE = 1 << 30
CHANNEL_OPTIONS = [("grpc.max_send_message_length", MAX_MESSAGE), ("grpc.max_receive_message_length", MAX_MESSAGE)]
CHECKPOINT_NAME = "state.dpadmm"
LEDGER_NAME = "privacy_ledger.json"
LEDGER_FORMAT = "dpadmm-party-ledger/1"


class _Refused(Exception):
    """A request the party will not serve (→ PERMISSION_DENIED / INVALID_ARGUMENT)."""

    def __init__(self, message: str, code: str = "PERMISSION_DENIED", budget: dict | None = None):
        super().__init__(message)
        self.code = code
        self.budget = budget  # the budget decision behind a refusal (for the audit log)


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def _floor_multiplier(nm: float) -> float:
    """``nm`` rounded *down* to 4 significant digits: fewer distinct values to compose (a step's cost stays
    bounded when σ/Δ varies from round to round) and never an optimistic ε (less noise accounted)."""
    if not math.isfinite(nm) or nm <= 0:
        return nm
    scale = 10.0 ** (math.floor(math.log10(nm)) - 3)
    return math.floor(nm / scale * (1 - 1e-12)) * scale


class PartyBudget:
    """The party's own privacy ledger and budget, independent of the coordinator.

    Threat model: the coordinator may be malicious. It chooses the noise multiplier, clipping,
    relation and the number of rounds and runs; the party trusts only its own code. Each step
    function returns privacy events computed *at the party* from the sensitivity its own clipping
    enforces and the σ it actually drew, so the ledger composes what the party really released:

    - :class:`GaussianRelease` with ``mechanism == "gaussian"``: a Gaussian mechanism with noise
      multiplier σ/Δ (Δ = 0: a data-independent message, no cost), composed with dp-accounting's
      PLD accountant (the multiplier is rounded *down* to 4 significant digits, never optimistic);
    - :class:`PureDPRelease`: pure ε, composed by basic composition (ε's add), added to the
      Gaussian total at the same δ (basic composition of (ε₁, δ) and (ε₂, 0) is (ε₁+ε₂, δ));
    - anything else — an unknown event type, [Hu, eq. 16]'s ``range-gaussian`` (not DP), a negative
      or NaN σ/Δ/ε, a private step that returns no event at all — is ε = ∞, as is a failing accountant.

    A noise multiplier of 1e-12 therefore gives ε = ∞ and is refused whatever the cap. The ledger
    composes every release of the party together, whatever name the coordinator gave it (a party
    hosting several nodes is then accounted conservatively), and holds releases of one neighbouring
    relation: the first release fixes it and a run under another relation is refused (its ε would be
    a different guarantee). ``min_noise_multiplier`` is an optional floor on σ/Δ per release.

    The ledger file ``OUT/privacy_ledger.json`` is rewritten atomically *before* the reply leaves
    the party, so a crash never loses a release that was sent (a resumed run is charged again,
    which is conservative). Deleting the file resets the budget: it is the only record of what was
    spent on this party's data.
    """

    def __init__(self, out: Path, party: str, max_epsilon: float, delta: float,
                 min_noise_multiplier: float | None = None):
        from ..exceptions import InvalidParameterError

        if not (math.isfinite(max_epsilon) and max_epsilon > 0):
            raise InvalidParameterError(f"--max-epsilon must be a positive number, got {max_epsilon}.")
        if not (0.0 < delta < 1.0):
            raise InvalidParameterError(f"--delta must be in (0, 1), got {delta}.")
        if min_noise_multiplier is not None and not (min_noise_multiplier > 0):
            raise InvalidParameterError(f"--min-noise-multiplier must be positive, got {min_noise_multiplier}.")
        self.party = party
        self.max_epsilon = float(max_epsilon)
        self.delta = float(delta)
        self.min_noise_multiplier = None if min_noise_multiplier is None else float(min_noise_multiplier)
        self.path = Path(out) / LEDGER_NAME
        self.ledger = self._load()
        self.spent = self.epsilon()  # the recorded total (kept in step with the ledger by commit)

    def _load(self) -> dict:
        from ..exceptions import DataFileError

        if not self.path.is_file():
            return {"format": LEDGER_FORMAT, "party": self.party, "relation": None, "releases": 0,
                    "gaussian": {}, "pure_epsilon": 0.0, "infinite": 0, "runs": []}
        try:
            led = json.loads(self.path.read_text())
            ok = (isinstance(led, dict) and led.get("format") == LEDGER_FORMAT and isinstance(led.get("gaussian"), dict)
                  and all(float(k) > 0 and int(v) >= 0 for k, v in led["gaussian"].items())
                  and float(led.get("pure_epsilon", -1)) >= 0 and int(led.get("infinite", -1)) >= 0)
        except (ValueError, TypeError, OSError):
            ok = False
        if not ok:
            raise DataFileError(f"party {self.party!r}: its privacy ledger {self.path} is unreadable; it is the only "
                                "record of the budget spent on this party's data — restore it (deleting it resets "
                                "the budget).")
        led.setdefault("runs", [])
        return led

    def epsilon(self, ledger: dict | None = None) -> float:
        """The composed ε at ``delta`` of every release in ``ledger`` (default: the recorded one)."""
        from ..privacy.accountants.gaussian import gaussian_epsilon

        led = self.ledger if ledger is None else ledger
        if led["infinite"]:
            return math.inf
        counts = {float(k): int(c) for k, c in led["gaussian"].items() if int(c) > 0}
        if counts:
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # a failing accountant is ε = ∞ (refused)
                eps_g = gaussian_epsilon([m for m, c in counts.items() for _ in range(c)], self.delta, "pld")
        else:
            eps_g = 0.0
        total = eps_g + float(led["pure_epsilon"])
        return total if math.isfinite(total) and total >= 0 else math.inf

    def charge(self, events, *, private_step: bool, round_: int, protocol: str, run: str) -> tuple[dict, dict]:
        """The ledger with this step's ``events`` added and the decision; raises ``_Refused`` over budget."""
        from ..privacy.events import GaussianRelease, PureDPRelease

        led = json.loads(json.dumps(self.ledger))  # a copy: committed only if the step is allowed
        before = self.spent
        reasons = []
        events = list(events)
        if private_step and not events:
            led["infinite"] += 1
            reasons.append("the step released its message without a privacy event (an unaccounted release, ε = ∞)")
        for e in events:
            rel = getattr(getattr(e, "relation", None), "key", None)
            if isinstance(e, GaussianRelease):
                sens, sigma = float(e.sensitivity), float(e.sigma)
                if e.mechanism != "gaussian":
                    led["infinite"] += 1
                    reasons.append(f"a {e.mechanism!r} release is not differentially private (ε = ∞)")
                elif not (sens >= 0 and sigma >= 0) or math.isnan(sens) or math.isnan(sigma) or math.isinf(sens):
                    led["infinite"] += 1
                    reasons.append(f"a release with sensitivity {sens} and σ {sigma} cannot be accounted (ε = ∞)")
                elif sens > 0:
                    nm = sigma / sens
                    if self.min_noise_multiplier is not None and nm < self.min_noise_multiplier:
                        reasons.append(f"its noise multiplier σ/Δ = {nm:.4g} is below its operator's floor "
                                       f"--min-noise-multiplier {self.min_noise_multiplier:g}")
                    if nm > 0 and math.isfinite(nm):
                        key = repr(_floor_multiplier(nm))
                        led["gaussian"][key] = int(led["gaussian"].get(key, 0)) + 1
                    elif not nm > 0:
                        led["infinite"] += 1
                        reasons.append(f"a release without noise (σ = {sigma:g}) has ε = ∞")
            elif isinstance(e, PureDPRelease):
                eps = float(e.epsilon)
                if not (eps >= 0) or math.isnan(eps):
                    led["infinite"] += 1
                    reasons.append(f"a pure-DP release with ε = {eps} cannot be accounted (ε = ∞)")
                else:
                    led["pure_epsilon"] = float(led["pure_epsilon"]) + eps
            else:
                led["infinite"] += 1
                reasons.append(f"an unknown privacy event {type(e).__name__} cannot be accounted (ε = ∞)")
            if rel is not None:
                if led["relation"] is None:
                    led["relation"] = rel
                elif rel != led["relation"]:
                    reasons.append(f"its ledger holds releases under the relation {led['relation']!r}, this one is "
                                   f"under {rel!r} (a separate guarantee: use another --out, or delete the ledger to "
                                   "reset the budget)")
            led["releases"] += 1
        after = self.epsilon(led)
        if after > self.max_epsilon:
            reasons.append(f"the release would bring its spend to ε = {after:.4g} at δ = {self.delta:g}, above its "
                           f"operator's cap --max-epsilon {self.max_epsilon:g}")
        now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        runs = led["runs"]
        if not runs or runs[-1].get("run") != run:
            runs.append({"run": run, "started": now, "protocol": protocol, "releases": 0})
        runs[-1].update(releases=int(runs[-1]["releases"]) + len(events), last_round=round_ + 1,
                        epsilon_after=after if math.isfinite(after) else "inf", updated=now)
        decision = {"decision": "refused" if reasons else "allowed", "epsilon_before": _num(before),
                    "epsilon_after": _num(after), "max_epsilon": self.max_epsilon, "delta": self.delta,
                    "releases": len(events), "ledger": str(self.path)}
        if reasons:
            raise _Refused(f"party {self.party!r} refused round {round_ + 1} and sent nothing: "
                           + "; ".join(dict.fromkeys(reasons)) + f" (its cap: ε ≤ {self.max_epsilon:g} at δ = "
                           f"{self.delta:g}; spent before this release: ε = {before:.4g}; with it: ε = {after:.4g}; "
                           f"ledger {self.path})", budget=decision)
        led["updated"] = now
        led["epsilon_spent"] = _num(after)
        led["delta"] = self.delta
        self._pending = after
        return led, decision

    def commit(self, ledger: dict) -> None:
        """Record the charged ledger (atomically) before the reply is sent."""
        _atomic_write(self.path, (json.dumps(ledger, indent=1) + "\n").encode())
        self.ledger = ledger
        self.spent = self._pending

    def status(self) -> dict:
        return {"epsilon_spent": _num(self.spent), "max_epsilon": self.max_epsilon, "delta": self.delta,
                "releases": int(self.ledger["releases"]), "ledger": str(self.path)}


def _num(x: float):
    return x if math.isfinite(x) else "inf"


class PartyService:
    """The party's state machine, independent of gRPC (so it is easy to test and to audit)."""

    def __init__(self, *, name: str, protocol, data: Mapping[str, str], out, allow: tuple[str, ...] = (),
                 allow_monitoring: bool = False, secure: bool = True, describe_options: Mapping[str, Any] = None,
                 accept_coordinator_data: bool = False, echo=None, allow_seeded_noise: bool = False,
                 requests=None, private_only: bool = False, max_rounds: int | None = None,
                 max_epsilon: float | None = None, delta: float | None = None,
                 min_noise_multiplier: float | None = None):
        self.name = name
        protos = list(protocol) if isinstance(protocol, (list, tuple)) else [protocol]
        self.protocols = {p.name: p for p in protos}  # a party may serve several (e.g. statistics, then ADMM)
        self.protocol = protos[0]
        self.data = {k: Path(v) for k, v in data.items()}
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.allow = tuple(allow)
        self.allow_monitoring = bool(allow_monitoring)
        self.accept_coordinator_data = bool(accept_coordinator_data)
        # operator policy (the coordinator cannot change it): a coordinator-chosen noise seed would let the
        # coordinator regenerate the noise; "refit" returns a model fitted to this party's block, so it is
        # off unless the operator lists it (the label party, whose organisation runs the coordinator)
        self.allow_seeded_noise = bool(allow_seeded_noise)
        self.requests = None if requests is None else set(requests)
        self.private_only = bool(private_only)
        self.max_rounds = None if max_rounds is None else int(max_rounds)  # a cap on this party's releases per run
        self.steps = 0
        # the party's own privacy budget (None: no cap; the coordinator's report is then the only account)
        self.budget = None
        if max_epsilon is not None or min_noise_multiplier is not None:
            from ..exceptions import InvalidParameterError

            if max_epsilon is None or delta is None:
                raise InvalidParameterError("a party's own budget needs both --max-epsilon E and --delta D "
                                            "(--min-noise-multiplier is a floor on top of it).")
            self.budget = PartyBudget(Path(out), name, max_epsilon, delta, min_noise_multiplier)
        self._budget_note = None
        self.echo = echo  # e.g. print to stderr: refusals and errors, one line each, at the party's side too
        self.secure = secure
        self.describe_options = dict(describe_options or {})
        self.allowed_types = codec.allow_list([t for p in protos for t in p.types])
        self.lock = threading.Lock()
        self.audit_path = self.out / "audit.jsonl"
        self._audit = open(self.audit_path, "a", buffering=1)
        self.finished = threading.Event()
        self._seen_peers: set = set()  # callers seen (a new one is logged once: "connected")
        self._reset()
        self.facts = {}
        for key, path in self.data.items():
            if not path.is_file():
                from ..exceptions import DataFileError

                raise DataFileError(f"party {name!r}: data file {key}={path} not found; check --data.")
            desc = next((p.describe for p in protos if p.describe is not None), None)
            self.facts[key] = desc(path, **self.describe_options) if desc else {}

    def _reset(self):
        self.run_id = ""
        self.cfg = self.state = None
        self.index = 0
        self.noise_seed = None
        self.rng = None
        self.rounds = 0
        self.steps = 0
        self.private = False

    # ---------------------------------------------------------------- audit
    def audit(self, peer: str, method: str, status: str, detail: str = "", request=None, reply=None,
              nbytes: int = 0, budget: dict | None = None):
        rec = {"time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds"),
               "party": self.name, "peer": peer, "method": method, "status": status, "request_bytes": nbytes}
        if detail:
            rec["detail"] = detail
        if budget is not None:  # the party's own budget decision (allowed/refused, ε before/after, cap)
            rec["budget"] = budget
        if request is not None:
            rec["request"] = codec.summarize(request)
        if reply is not None:
            rec["reply"] = codec.summarize(reply)
        self._audit.write(json.dumps(rec) + "\n")

    # ---------------------------------------------------------------- dispatch
    def handle(self, method: str, payload: bytes, peer: str) -> bytes:
        """Serve one call: identity and decoding checks, then the method; raises ``_Refused``/Exception."""
        request = None
        self._budget_note = None
        try:
            if self.secure and peer not in self.allow:
                raise _Refused(f"party {self.name!r} refuses caller {peer!r}: not on its allow list {list(self.allow)}")
            try:
                request = codec.decode(payload, allowed=self.allowed_types)
            except codec.DecodeError as exc:
                raise _Refused(f"party {self.name!r} {exc}", "INVALID_ARGUMENT") from None
            if not isinstance(request, dict):
                raise _Refused(f"party {self.name!r} refused {method}: the request must be a mapping", "INVALID_ARGUMENT")
            with self.lock:
                reply = getattr(self, "_" + method.lower())(request)
            data = codec.encode(reply, allowed=self.allowed_types)
        except _Refused as exc:
            self.audit(peer, method, "refused", str(exc), request, nbytes=len(payload), budget=exc.budget)
            if self.echo is not None:
                self.echo(f"refused {method} from {peer or '(insecure)'}: {exc}")
            raise
        except Exception as exc:
            reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            self.audit(peer, method, "error", reason, request, nbytes=len(payload))
            if self.echo is not None:
                self.echo(f"error in {method}: {reason}")
            raise
        self.audit(peer, method, "ok", "", request, reply, nbytes=len(payload), budget=self._budget_note)
        if self.echo is not None:  # state changes only (connected, run started/resumed/ended), never a heartbeat
            from .grpc_ops import state_line

            line = state_line(self, method, peer, reply)
            if line:
                self.echo(line)
        return data

    def _need_setup(self, method):
        if self.cfg is None:
            raise _Refused(f"party {self.name!r} refused {method}: no run is set up (call Setup first)",
                           "FAILED_PRECONDITION")

    def _served(self, protocol=None) -> set:
        """The declared requests this party answers for ``protocol``: the operator's --requests (default: all
        declared but refit); an alignment protocol's requests (PSI) are its messages, always served."""
        proto = protocol or self.protocol
        if proto.alignment:
            return set(proto.handlers)
        base = set(proto.handlers) - {"refit"} if self.requests is None else self.requests
        return base & set(proto.handlers)

    def _hello(self, req):
        return {"name": self.name, "protocol": self.protocol.name, "protocols": sorted(self.protocols),
                "version": WIRE_VERSION, "data": self.facts,
                "requests": sorted(set().union(*(self._served(p) for p in self.protocols.values()))),
                "monitoring_in_private_runs": self.allow_monitoring}

    def _localise(self, obj):
        """Replace every PartyData reference by the block read from this party's own file."""
        if isinstance(obj, PartyData):
            if obj.key not in self.data:
                raise _Refused(f"party {self.name!r} has no data {obj.key!r} (it was started with "
                               f"{sorted(self.data)}; add --data {obj.key}=FILE)", "FAILED_PRECONDITION")
            params = dict(obj.params, **self.describe_options)
            if params.pop("psi", False):  # rows of the PSI intersection, in its order: from this party's own alignment
                from ..data.psi import aligned_ids
                from ..exceptions import ProtocolError

                try:
                    params.update(ids=aligned_ids(self.data[obj.key]), subset=True)
                except ProtocolError as exc:
                    raise _Refused(f"party {self.name!r}: {exc}", "FAILED_PRECONDITION") from None
            return self.protocol.load(self.data[obj.key], params)
        if isinstance(obj, list):
            return [self._localise(v) for v in obj]
        if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
            return tuple(self._localise(v) for v in obj)
        if isinstance(obj, dict):
            return {k: self._localise(v) for k, v in obj.items()}
        return obj

    def _setup(self, req):
        if req.get("protocol") not in self.protocols:
            raise _Refused(f"party {self.name!r} serves protocol {sorted(self.protocols)}, not {req.get('protocol')!r}")
        self.protocol = self.protocols[req["protocol"]]
        if req.get("party") != self.name:
            raise _Refused(f"this party is {self.name!r}, not {req.get('party')!r}")
        raw = list(req.get("args", []))
        for i in self.protocol.data_args:
            if i < len(raw) and not self.accept_coordinator_data and _holds_arrays(raw[i]):
                raise _Refused(f"party {self.name!r} refused data sent by the coordinator (setup argument {i}): it reads "
                               "its own files (--data KEY=FILE); a simulation can opt in with --accept-coordinator-data")
        args = self._localise(raw)
        self._reset()
        self.cfg, self.state = self.protocol.setup(*args)
        self.index = int(req.get("index", 0))
        seed = req.get("noise_seed")
        self.noise_seed = None if seed is None else int(seed)
        # party-local entropy: made here from the OS, never sent anywhere
        self.rng = np.random.default_rng() if self.noise_seed is None else None
        self.private = bool(self.protocol.private(self.cfg)) if self.protocol.private else False
        if self.noise_seed is not None and not self.allow_seeded_noise:
            self._reset()
            raise _Refused(f"party {self.name!r} refused a coordinator-chosen noise seed (whoever knows it can remove "
                           "the noise); its operator can allow a reproducible simulation with --allow-seeded-noise")
        if self.protocol.alignment:  # PSI: releases no feature/label value; budgets and --private-only do not apply
            pass
        elif self.private_only and not self.private:
            self._reset()
            raise _Refused(f"party {self.name!r} refused a non-private run (its operator started it with --private-only)")
        if self.budget is not None and not self.private:
            self._reset()
            raise _Refused(f"party {self.name!r} refused a non-private run: its operator gave it a privacy budget "
                           f"(--max-epsilon {self.budget.max_epsilon:g}) and an un-noised release has ε = ∞",
                           budget=dict(self.budget.status(), decision="refused"))
        self.run_id = f"{datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}/{os.urandom(4).hex()}"
        if self.budget is not None:
            self._budget_note = dict(self.budget.status(), decision="setup")
        return {"private": self.private, "noise_source": "party-local" if self.noise_seed is None else "seeded"}

    def _step(self, req):
        self._need_setup("Step")
        t = int(req["round"])
        if self.max_rounds is not None and (self.steps >= self.max_rounds or t >= self.max_rounds):
            raise _Refused(f"party {self.name!r} refused round {t + 1}: its operator allows at most "
                           f"{self.max_rounds} rounds per run (--max-rounds)")
        self.steps += 1
        rng = self.rng if self.rng is not None else np.random.default_rng(
            np.random.SeedSequence(self.noise_seed, spawn_key=(self.index, t)))
        state, outbox, events = self.protocol.step(self.cfg, self.state, req["inbox"], rng=rng)
        if self.budget is not None:  # compose the ledger with this release; refuse (send nothing) over the cap
            ledger, self._budget_note = self.budget.charge(events, private_step=self.private, round_=t,
                                                           protocol=self.protocol.name, run=self.run_id)
            self.budget.commit(ledger)  # recorded before the reply leaves the party
        self.state = state
        self.rounds = t + 1
        return {"outbox": outbox, "events": list(events)}

    def _request(self, req):
        self._need_setup("Request")
        handler = req.get("handler")
        fn = self.protocol.handlers.get(handler) if isinstance(handler, str) else None
        served = self._served()
        if fn is not None and handler not in served:
            raise _Refused(f"party {self.name!r} refused request {handler!r}: its operator serves only {sorted(served)} "
                           "(--requests)")
        if fn is not None and handler == "score" and self.private and not self.allow_monitoring:
            raise _Refused(f"party {self.name!r} refused request 'score' in a private run (un-noised partial scores); "
                           "its operator can opt in with --allow-monitoring")
        if fn is None:
            raise _Refused(f"party {self.name!r} refused request {handler!r}: protocol {self.protocol.name!r} declares "
                           f"only {sorted(self.protocol.handlers)} (a party's model and data never leave it)")
        from ..exceptions import ProtocolError

        try:
            return {"value": fn(self.cfg, self.state, *req.get("args", []))}
        except ProtocolError as exc:  # a declared handler that refuses this party's case (e.g. 'refit' at a passive party)
            raise _Refused(str(exc)) from None

    def _diagnose(self, req):
        self._need_setup("Diagnose")
        if self.protocol.diagnose is None:
            raise _Refused(f"party {self.name!r} refused Diagnose: protocol {self.protocol.name!r} declares no monitoring")
        if self.private and not self.allow_monitoring:
            raise _Refused(f"party {self.name!r} refused monitoring in a private run (its values are not noised); "
                           "its operator can opt in with --allow-monitoring")
        return {"value": self.protocol.diagnose(self.cfg, self.state)}

    def _checkpoint(self, req):
        self._need_setup("Checkpoint")
        t = int(req["round"])
        blob = codec.encode({"protocol": self.protocol.name, "party": self.name, "round": t, "state": self.state},
                            allowed=self.allowed_types)
        _atomic_write(self.out / "checkpoint" / CHECKPOINT_NAME, blob)
        return {"round": t}

    def _restore(self, req):
        self._need_setup("Restore")
        t = int(req["round"])
        path = self.out / "checkpoint" / CHECKPOINT_NAME
        if not path.is_file():
            raise _Refused(f"party {self.name!r} has no checkpoint at {path}; resume needs every party's own "
                           "checkpoint from the same run", "FAILED_PRECONDITION")
        ck = codec.decode(path.read_bytes(), allowed=self.allowed_types)
        if ck.get("round") != t or ck.get("protocol") != self.protocol.name or ck.get("party") != self.name:
            raise _Refused(f"party {self.name!r}'s checkpoint is from round {ck.get('round')}, the coordinator's from "
                           f"round {t}; restart every side from the same run", "FAILED_PRECONDITION")
        self.state = ck["state"]
        self.rounds = t + 1
        return {"round": t}

    def _finish(self, req):
        written = None
        if self.cfg is not None and bool(req.get("completed")) and self.protocol.model is not None:
            coef = np.asarray(self.protocol.model(self.cfg, self.state))
            fd, tmp = tempfile.mkstemp(dir=self.out, prefix=".tmp-", suffix=".npz")
            os.close(fd)
            np.savez(tmp, coef=coef)
            os.replace(tmp, self.out / "model.npz")
            meta = {"party": self.name, "protocol": self.protocol.name, "rounds": self.rounds,
                    "shape": list(coef.shape), "private": self.private,
                    "noise_source": "party-local" if self.noise_seed is None else "seeded",
                    "written": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
            _atomic_write(self.out / "model.json", (json.dumps(meta, indent=2) + "\n").encode())
            written = "model.npz"
        self._reset()
        self.finished.set()
        return {"written": written}

    def close(self):
        try:
            self._audit.close()
        except Exception:
            pass


def _holds_arrays(obj) -> bool:
    if isinstance(obj, np.ndarray):
        return True
    if isinstance(obj, (list, tuple)):
        return any(_holds_arrays(v) for v in obj)
    if isinstance(obj, dict):
        return any(_holds_arrays(v) for v in obj.values())
    return False


def peer_name(context) -> str:
    """The verified common name of the caller's client certificate ('' without TLS)."""
    try:
        ctx = context.auth_context()
    except Exception:
        return ""
    cn = ctx.get("x509_common_name") or []
    return cn[0].decode() if cn else ""


def make_server(service: PartyService, listen: str, tls=None, *, max_workers: int = 4):
    """A started-not-yet gRPC server bound to ``listen`` serving ``service``; returns (server, port)."""
    import grpc

    codes = {"PERMISSION_DENIED": grpc.StatusCode.PERMISSION_DENIED,
             "INVALID_ARGUMENT": grpc.StatusCode.INVALID_ARGUMENT,
             "FAILED_PRECONDITION": grpc.StatusCode.FAILED_PRECONDITION}

    def method(name):
        def call(payload, context):
            try:
                return service.handle(name, payload, peer_name(context) if service.secure else "")
            except _Refused as exc:
                context.abort(codes.get(exc.code, grpc.StatusCode.PERMISSION_DENIED), str(exc))
            except Exception as exc:
                first = str(exc).splitlines()[0] if str(exc) else ""
                context.abort(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {first}" if first
                              else type(exc).__name__)
        return grpc.unary_unary_rpc_method_handler(call)

    from .grpc_ops import unknown_method_handler

    from .grpc_stream import STREAM_METHOD, stream_handler

    handler = grpc.method_handlers_generic_handler(SERVICE, {**{m: method(m) for m in getattr(service, "methods", METHODS)},
                                                             STREAM_METHOD: stream_handler(service, aio=False)})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers),
                         handlers=(handler, unknown_method_handler(service, aio=False)),
                         options=CHANNEL_OPTIONS, maximum_concurrent_rpcs=None)
    if tls is None:
        port = server.add_insecure_port(listen)
    else:
        creds = grpc.ssl_server_credentials([(tls.key, tls.cert)], root_certificates=tls.ca, require_client_auth=True)
        port = server.add_secure_port(listen, creds)
    if port == 0:
        from ..exceptions import InvalidParameterError

        raise InvalidParameterError(f"cannot listen on {listen}; is the port in use? (give --listen HOST:PORT)")
    return server, port


def serve(service: PartyService, listen: str, tls=None, *, once: bool = False, ready=None) -> None:
    """Serve until interrupted (or, with ``once``, until the coordinator sends Finish).

    Runs gRPC's asyncio server: each call is handled on the event loop's thread (one party serves
    one coordinator, calls are sequential), saving the thread hand-off of the threaded server —
    the dominant per-call cost when many parties share few cores.
    """
    import asyncio

    import grpc

    codes = {"PERMISSION_DENIED": grpc.StatusCode.PERMISSION_DENIED,
             "INVALID_ARGUMENT": grpc.StatusCode.INVALID_ARGUMENT,
             "FAILED_PRECONDITION": grpc.StatusCode.FAILED_PRECONDITION}

    def method(name):
        async def call(payload, context):
            try:
                return service.handle(name, payload, peer_name(context) if service.secure else "")
            except _Refused as exc:
                await context.abort(codes.get(exc.code, grpc.StatusCode.PERMISSION_DENIED), str(exc))
            except Exception as exc:
                first = str(exc).splitlines()[0] if str(exc) else ""
                await context.abort(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {first}" if first
                                    else type(exc).__name__)
        return grpc.unary_unary_rpc_method_handler(call)

    async def main():
        server = grpc.aio.server(options=CHANNEL_OPTIONS)
        from .grpc_ops import unknown_method_handler

        from .grpc_stream import STREAM_METHOD, stream_handler

        served = {**{m: method(m) for m in getattr(service, "methods", METHODS)},
                  STREAM_METHOD: stream_handler(service, aio=True)}
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, served),
                                         unknown_method_handler(service, aio=True)))
        if tls is None:
            port = server.add_insecure_port(listen)
        else:
            creds = grpc.ssl_server_credentials([(tls.key, tls.cert)], root_certificates=tls.ca,
                                                require_client_auth=True)
            port = server.add_secure_port(listen, creds)
        if port == 0:
            from ..exceptions import InvalidParameterError

            raise InvalidParameterError(f"cannot listen on {listen}; is the port in use? (give --listen HOST:PORT)")
        await server.start()
        if ready is not None:
            ready(port)
        try:
            while True:
                await asyncio.sleep(0.2)
                if service.finished.is_set():
                    if once:
                        await asyncio.sleep(0.2)  # let the Finish reply go out
                        break
                    service.finished.clear()
        finally:
            await server.stop(1.0)

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    finally:
        service.close()
