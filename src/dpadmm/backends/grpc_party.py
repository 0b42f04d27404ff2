"""A party in its own organisation: a gRPC server that serves one declared protocol over mutual TLS.

``dpadmm party serve`` runs :func:`serve`. The party

- listens on one port (the coordinator dials it; the party needs no outbound access), plus, for the
  rounds' Step frames, its round channel (:mod:`tls_rounds`, ``--rounds-listen``), and accepts
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
- follows its operator's :class:`~dpadmm.privacy.policy.PartyPolicy` whatever the coordinator sends:
  every privacy-relevant Setup field is checked against it (the protocol's ``policy`` hooks) and
  the run the coordinator declares at Setup (its rounds) is priced against the party's own budget
  (``--max-epsilon E --delta D``, :class:`~dpadmm.privacy.party_ledger.PartyBudget`, recorded in
  ``OUT/privacy_ledger.json`` across runs) and refused up front if it would overspend; each round is
  let through only within that declaration. Nothing is released before these checks.
"""

from __future__ import annotations

import os

os.environ.setdefault("GRPC_VERBOSITY", "NONE")  # errors reach the user as one line of ours, not gRPC's C-core log
import dataclasses
import datetime
import json
import tempfile
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from . import grpc_codec as codec
from .grpc_ops import state_line
from ..privacy.events import GaussianRelease
from ..privacy.party_ledger import JOURNAL_NAME, LEDGER_NAME, PartyBudget, released_since  # noqa: F401 (re-exported)
from ..privacy.policy import PartyPolicy, PolicyRefusal as _Refused
from ..privacy.psi_admission import admit_psi, admit_rows
from ..protocol import PartyData, Protocol

SERVICE = "dpadmm.Party"
METHODS = ("Hello", "Setup", "Step", "Request", "Diagnose", "Checkpoint", "Restore", "Finish")
WIRE_VERSION = 1
MAX_MESSAGE = 1 << 30
STREAM_WINDOW = 16 << 20
# both sides: message size caps; a 16 MiB initial HTTP/2 stream window (``lookahead_bytes``), so that a round's
# large message (vertical N-vectors, 260-520 kB) on the persistent stream is not held back by WINDOW_UPDATE round
# trips from the default 64 KiB window (measured: unary calls were faster than such a stream; with this window the
# stream is faster than unary calls)
CHANNEL_OPTIONS = [("grpc.max_send_message_length", MAX_MESSAGE), ("grpc.max_receive_message_length", MAX_MESSAGE),
                   ("grpc.http2.lookahead_bytes", STREAM_WINDOW)]
CHECKPOINT_NAME = "state.dpadmm"


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


class PartyService:
    """The party's state machine, independent of gRPC (so it is easy to test and to audit).

    ``policy`` (:class:`~dpadmm.privacy.policy.PartyPolicy`) is its operator's privacy policy; the flags
    ``private_only``, ``max_rounds``, ``max_epsilon``/``delta``, ``min_noise_multiplier`` set its fields. A
    service built without a budget or ``private_only`` checks nothing privacy-related (a simulation); the
    CLI (``dpadmm party serve``) never builds one silently: it needs a budget or ``--no-budget``.
    """

    def __init__(self, *, name: str, protocol, data: Mapping[str, str], out, allow: tuple[str, ...] = (),
                 allow_monitoring: bool = False, secure: bool = True, describe_options: Mapping[str, Any] = None,
                 accept_coordinator_data: bool = False, echo=None, allow_seeded_noise: bool = False,
                 requests=None, private_only: bool = False, max_rounds: int | None = None,
                 max_epsilon: float | None = None, delta: float | None = None,
                 min_noise_multiplier: float | None = None, policy: PartyPolicy | None = None):
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
        # the operator's privacy policy (the coordinator cannot change it); the flags are shorthands for its fields
        flags = {"private_only": private_only or None, "max_rounds": max_rounds, "max_epsilon": max_epsilon,
                 "delta": delta, "min_noise_multiplier": min_noise_multiplier}
        flags = {k: v for k, v in flags.items() if v is not None}
        self.policy = PartyPolicy(**flags) if policy is None else dataclasses.replace(policy, **flags)
        if "model" in self.data:  # started with its model file: a scoring server, which never fits (REDTEAM E7)
            self.policy = dataclasses.replace(self.policy, scoring_server=True)
        self.private_only = self.policy.private_work
        self.max_rounds = self.policy.max_rounds
        self.steps = 0
        # the party's own privacy budget (None: no cap; the coordinator's report is then the only account)
        self.budget = None if not self.policy.budgeted else PartyBudget(
            Path(out), name, self.policy.max_epsilon, self.policy.delta, ledger_dir=self.policy.ledger_dir, data=self.data)
        self._budget_note = None
        self.echo = echo  # e.g. print to stderr: refusals and errors, one line each, at the party's side too
        self.secure = secure
        self.describe_options = dict(describe_options or {})
        self.allowed_types = codec.allow_list([t for p in protos for t in p.types])
        self.lock = threading.Lock()
        self.audit_path = self.out / "audit.jsonl"
        self._audit = open(self.audit_path, "a", buffering=1)
        self._audit_lock = threading.Lock()
        self._audit_fixed: dict = {}  # (peer, method, status) -> the audit line's text of those fields
        # the operator's policy, once per start (an opt-out of the budget is on record)
        self._audit.write(json.dumps({
            "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds"), "party": name,
            "method": "Start", "status": "ok", "policy": self.policy.to_dict(),
            "detail": ("privacy budget: " + (f"ε ≤ {self.policy.max_epsilon:g} at δ = {self.policy.delta:g}"
                                             if self.policy.budgeted else "NONE (no ledger; the coordinator's report "
                                                                          "is the only account)"))}) + "\n")
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
        self.declared_rounds = None
        if getattr(self, "budget", None) is not None:
            self.budget.close_run()
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
        # the same line as json.dumps(rec) for rec = {"time", "party", "peer", "method", "status", "request_bytes",
        # ["detail"], ["budget"], ["request"], ["reply"]} (request/reply: codec.summarize(...)), built from cached
        # texts: the fixed fields' (a run repeats a few callers, methods and statuses) and the summaries'
        # (codec.summary_json: a run repeats a few message structures)
        key = (peer, method, status)
        fixed = self._audit_fixed.get(key)
        if fixed is None:
            fixed = json.dumps({"party": self.name, "peer": peer, "method": method, "status": status,
                                "request_bytes": 0})[1:-1].rpartition(" ")[0] + " "
            if len(self._audit_fixed) < 256:
                self._audit_fixed[key] = fixed
        parts = ['{"time": "', datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds"),
                 '", ', fixed, str(int(nbytes))]
        if detail:
            parts.append(', "detail": ' + json.dumps(detail))
        if budget is not None:  # the party's own budget decision (allowed/refused, ε before/after, cap)
            parts.append(', "budget": ' + json.dumps(budget))
        if request is not None:
            parts.append(', "request": ' + codec.summary_json(request))
        if reply is not None:
            parts.append(', "reply": ' + codec.summary_json(reply))
        parts.append("}\n")
        line = "".join(parts)
        with self._audit_lock:  # whole lines: calls (and refused connections) are audited from several threads
            self._audit.write(line)

    # ---------------------------------------------------------------- dispatch
    def handle(self, method: str, payload: bytes, peer: str) -> bytes:
        """Serve one call: identity and decoding checks, then the method; raises ``_Refused``/Exception."""
        request = None
        note = None
        try:
            if self.secure and peer not in self.allow:
                raise _Refused(f"party {self.name!r} refuses caller {peer!r}: not on its allow list {list(self.allow)}")
            try:
                request = codec.decode(payload, allowed=self.allowed_types)
            except codec.DecodeError as exc:
                raise _Refused(f"party {self.name!r} {exc}", "INVALID_ARGUMENT") from None
            if not isinstance(request, dict):
                raise _Refused(f"party {self.name!r} refused {method}: the request must be a mapping", "INVALID_ARGUMENT")
            with self.lock:  # the budget decision is read under the lock: calls arrive on several threads
                self._budget_note = None
                reply = getattr(self, "_" + method.lower())(request)
                note = self._budget_note
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
        self.audit(peer, method, "ok", "", request, reply, nbytes=len(payload), budget=note)
        if self.echo is not None:  # state changes only (connected, run started/resumed/ended), never a heartbeat
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
        hello = {"name": self.name, "protocol": self.protocol.name, "protocols": sorted(self.protocols),
                 "version": WIRE_VERSION, "data": self.facts,
                 "requests": sorted(set().union(*(self._served(p) for p in self.protocols.values()))),
                 "monitoring_in_private_runs": self.allow_monitoring}
        port = getattr(self, "round_port", None)  # set only while its round channel listens (tls_rounds)
        if port:
            hello["rounds"] = {"port": int(port)}
        return hello

    def _localise(self, obj):
        """Replace every PartyData reference by the block read from this party's own file."""
        if isinstance(obj, PartyData):
            if obj.key not in self.data:
                raise _Refused(f"party {self.name!r} has no data {obj.key!r} (it was started with "
                               f"{sorted(self.data)}; add --data {obj.key}=FILE)", "FAILED_PRECONDITION")
            # rows only through a PSI intersection this party took part in (data.psi: PSI is the only door)
            params = admit_rows(self.name, obj.key, self.data[obj.key], dict(obj.params, **self.describe_options))
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
        seed = req.get("noise_seed")
        if seed is not None and not self.allow_seeded_noise:
            raise _Refused(f"party {self.name!r} refused a coordinator-chosen noise seed (whoever knows it can remove "
                           "the noise); its operator can allow a reproducible simulation with --allow-seeded-noise")
        hooks = self.protocol.policy
        if hooks is not None and hooks.prepare is not None:
            raw = hooks.prepare(raw, self.policy)  # the party's own values where it can impose them
        args = self._localise(raw)
        self._reset()
        self.cfg, self.state = self.protocol.setup(*args)
        self.index = int(req.get("index", 0))
        self.noise_seed = None if seed is None else int(seed)
        # party-local entropy: made here from the OS, never sent anywhere
        self.rng = np.random.default_rng() if self.noise_seed is None else None
        self.private = bool(self.protocol.private(self.cfg)) if self.protocol.private else False
        self.run_id = f"{datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}/{os.urandom(4).hex()}"
        try:
            self._budget_note = self._admit(req, args)
        except Exception:
            self._reset()
            raise
        return {"private": self.private, "noise_source": "party-local" if self.noise_seed is None else "seeded",
                "policy": "budgeted" if self.budget is not None else ("private-only" if self.private_only else
                                                                      "no budget")}

    def _admit(self, req, args) -> dict | None:
        """The party's policy on a set-up run, before anything is released: its checks, the declared rounds,
        and (with a budget) the price of the whole run against what is left (:mod:`dpadmm.privacy.policy`)."""
        if self.protocol.alignment or not self.protocol.rounds:  # PSI: its operator's caps; scoring: nothing to price
            return admit_psi(self.name, self.policy, self.out, args) if self.protocol.alignment else None
        if self.private_only and not self.private:
            why = (f"its operator gave it a privacy budget (--max-epsilon {self.budget.max_epsilon:g}) and an un-noised "
                   "release has ε = ∞") if self.budget is not None else "its operator started it with --private-only"
            raise _Refused(f"party {self.name!r} refused a non-private run: {why}",
                           budget=None if self.budget is None else dict(self.budget.status(), decision="refused"))
        hooks = self.protocol.policy
        if hooks is not None and hooks.check is not None:
            hooks.check(self.cfg, args, self.policy, self.name)
        rounds = req.get("rounds")
        if rounds is not None:
            if isinstance(rounds, bool) or not isinstance(rounds, (int, np.integer)) or rounds < 1:
                raise _Refused(f"party {self.name!r} refused the run: declared rounds must be a positive integer, "
                               f"got {rounds!r}", "INVALID_ARGUMENT")
            self.declared_rounds = int(rounds)
        if self.max_rounds is not None and rounds is not None and rounds > self.max_rounds:
            raise _Refused(f"party {self.name!r} refused the run at Setup: {rounds} declared rounds, its operator allows "
                           f"at most {self.max_rounds} rounds per run (--max-rounds)")
        if self.budget is None:
            return None
        if rounds is None:
            raise _Refused(f"party {self.name!r} refused the run: it has a privacy budget and prices every run at Setup, "
                           "but the coordinator declared no number of rounds (a dpadmm coordinator declares them; "
                           "update it)", budget=dict(self.budget.status(), decision="refused"))
        if hooks is None or hooks.price is None:
            raise _Refused(f"party {self.name!r} refused the run: protocol {self.protocol.name!r} declares no price, "
                           "so a budgeted party cannot serve it", budget=dict(self.budget.status(), decision="refused"))
        return self.budget.open_run(self.run_id, self.protocol.name, hooks.price(self.cfg, self.declared_rounds),
                                    self.declared_rounds)

    def _step(self, req):
        self._need_setup("Step")
        t = req.get("round")
        if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or t != self.rounds:
            # strictly the next round (Setup: 0, Restore: the checkpoint's + 1): no replayed or negative index, so
            # no zero-cost round can be served twice and no schedule is indexed from its end (REDTEAM_POLICY R2)
            raise _Refused(f"party {self.name!r} refused round index {t!r} and sent nothing: the next round is "
                           f"{self.rounds} (rounds are served once, in order)", "INVALID_ARGUMENT")
        t = int(t)
        if self.max_rounds is not None and (self.steps >= self.max_rounds or t >= self.max_rounds):
            raise _Refused(f"party {self.name!r} refused round {t + 1}: its operator allows at most "
                           f"{self.max_rounds} rounds per run (--max-rounds)")
        if self.declared_rounds is not None and t >= self.declared_rounds:
            raise _Refused(f"party {self.name!r} refused round {t + 1} and sent nothing: the coordinator declared "
                           f"{self.declared_rounds} rounds at Setup")
        self.steps += 1
        rng = self.rng if self.rng is not None else _SeededGenerator(self.noise_seed, (self.index, t))
        state, outbox, events = self.protocol.step(self.cfg, self.state, req["inbox"], rng=rng)
        if self.private and _free_release(events) and not _all_zero(outbox):
            raise _Refused(f"party {self.name!r} refused round {t + 1} and sent nothing: its step priced a non-zero "
                           "message at sensitivity 0 (an un-noised release; only an all-zero message is free)")
        if self.budget is not None:  # within the run priced at Setup? recorded before the reply leaves (O(1))
            # a message with no non-zero number (e.g. the statistics' "done" after failed ranges) needs no event
            self._budget_note = self.budget.charge(events, private_step=self.private and not _all_zero(outbox),
                                                   round_=t)
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
        if fn is not None and handler in ("score", "rank") and self.private and not self.allow_monitoring:
            # un-noised and data-dependent: partial scores; the block's numerical rank (REDTEAM_POLICY R6)
            raise _Refused(f"party {self.name!r} refused request {handler!r} in a private run (un-noised values of its "
                           "data); its operator can opt in with --allow-monitoring")
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
        ck = {"protocol": self.protocol.name, "party": self.name, "round": t, "state": self.state}
        if self.budget is not None and self.budget.run is not None:  # what this run had charged at the checkpoint
            ck["ledger_run"] = {"run": self.run_id, "charged": json.loads(json.dumps(self.budget.run["charged"]))}
        blob = codec.encode(ck, allowed=self.allowed_types)
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
        return {"round": t, "released_again": self._released_again(ck, t)}

    def _released_again(self, ck, t: int) -> list:
        """What the checkpointed run released after round ``t + 1`` (before a crash): a resume releases those
        rounds again, so the party's ledger holds both; they go back to the coordinator's report too."""
        info = ck.get("ledger_run")
        if self.budget is None or not isinstance(info, dict):
            return []
        run = self.budget.find_run(info.get("run"))
        if run is None:
            return []
        from ..privacy.events import RECORD_REPLACE, FEATURE_COLUMN

        rel = {"feature_column": FEATURE_COLUMN}.get(run.get("relation"), RECORD_REPLACE)
        return released_since(run, info.get("charged", {}), self.name, rel, t)

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
        if self.budget is not None:
            self.budget.close()
        try:
            self._audit.close()
        except Exception:
            pass


class _SeededGenerator:
    """A seeded simulation's generator for one round, ``default_rng(SeedSequence(seed, spawn_key=key))`` — the same
    stream — built when the step first draws from it (a step that adds no noise, e.g. a no-op round, does not pay
    the ~20 µs of seeding). Protocol steps use their generator through its methods (``rng.standard_normal(...)``)."""

    __slots__ = ("_seed", "_key", "_gen")

    def __init__(self, seed: int, key: tuple):
        self._seed, self._key, self._gen = seed, key, None

    def __getattr__(self, name):
        gen = self._gen
        if gen is None:
            gen = self._gen = np.random.default_rng(np.random.SeedSequence(self._seed, spawn_key=self._key))
        return getattr(gen, name)


def _free_release(events) -> bool:
    """Whether a step released un-noised at sensitivity 0: free only if the message is exactly 0 (a release with
    σ > 0 at sensitivity 0 is noise around a zero the step itself checks, e.g. ``vertical_sharing.release``)."""
    return any(isinstance(e, GaussianRelease) and not float(e.sensitivity) > 0 and not float(e.sigma) > 0
               for e in events)


def _all_zero(obj) -> bool:
    """Every number in a (nested) message is exactly 0 (REDTEAM_POLICY R1: a release charged at sensitivity 0
    must carry nothing; a vector of entries 1e-200 is not nothing)."""
    if type(obj) is np.ndarray:  # the common case, without np.asarray / np.any's Python wrappers
        return obj.dtype.kind in "biufc" and not obj.any()
    if isinstance(obj, (np.ndarray, float, int, np.number)):
        a = np.asarray(obj)
        return a.dtype.kind in "biufc" and not np.any(a)  # other arrays (e.g. strings): not known to be empty
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return all(_all_zero(getattr(obj, f.name)) for f in dataclasses.fields(obj))
    if isinstance(obj, dict):
        return all(_all_zero(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):  # NamedTuple messages too
        return all(_all_zero(v) for v in obj)
    return True  # strings, None: no data-dependent number


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


class _WithRounds:
    """A threaded gRPC server and the party's round channel (:mod:`tls_rounds`), started and stopped together."""

    def __init__(self, server, rounds):
        self._server, self.rounds = server, rounds

    def stop(self, grace):
        self.rounds.close()
        return self._server.stop(grace)

    def __getattr__(self, key):
        return getattr(self._server, key)


def make_server(service: PartyService, listen: str, tls=None, *, max_workers: int = 4, rounds: str | None = None):
    """A started-not-yet gRPC server bound to ``listen`` serving ``service``; returns (server, port).

    ``rounds``: also serve the rounds' raw TLS channel (``"auto"`` or ``"HOST:PORT"``, :mod:`tls_rounds`; it
    listens at once, on threads of its own, and the Hello reply announces it); None: rounds on the gRPC stream.
    """
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
    from .tls_rounds import start_round_server

    round_server = start_round_server(service, tls, rounds, listen)
    if round_server is not None:
        server = _WithRounds(server, round_server)
    return server, port


def serve(service: PartyService, listen: str, tls=None, *, once: bool = False, ready=None,
          rounds: str | None = None) -> None:
    """Serve until interrupted (or, with ``once``, until the coordinator sends Finish).

    ``rounds`` (``"auto"``, ``"HOST:PORT"`` or None/``"off"``): also serve the rounds' ``Step`` frames on a raw
    mutual-TLS channel (:mod:`tls_rounds`, on threads of its own); ``ready(port)`` is called once both listen
    (``service.round_port`` is then the round channel's port, None without one).

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
        from .tls_rounds import start_round_server

        try:
            round_server = start_round_server(service, tls, rounds, listen)
        except Exception:
            await server.stop(None)
            raise
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
            if round_server is not None:
                round_server.close()
            await server.stop(1.0)

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    finally:
        service.close()
