"""The party runtime: one party's state machine under its operator's policy, whatever carries the messages.

Every backend hosts a party through this class — the gRPC party (:class:`~dpadmm.backends.grpc_party.PartyService`
decodes the wire bytes, calls :meth:`PartyRuntime.call`, encodes the reply) and, when a party is given a
:class:`~dpadmm.privacy.policy.PartyPolicy`, the in-process, process and Ray parties
(:class:`~dpadmm.runtime.local.HostedParty`). So the privacy of a party is written once:

- ``Setup`` (:mod:`dpadmm.runtime.admission`): protocol and party checks, the coordinator-data and noise-seed
  refusals, ``policy.prepare``, the party's own files for every PartyData, the protocol's setup, then the
  policy's checks, the declared rounds, ``max_rounds`` and the price of the run against the party's budget;
- ``Step``: strictly the next round, within the declaration and ``max_rounds``; a release priced at sensitivity
  0 must be all zeros; the budget is charged before the reply leaves; noise from the party's own generator
  (OS entropy unless its operator allowed a seeded simulation);
- ``Request``: only the protocol's declared handlers the operator serves (``--requests``), un-noised ones
  refused in private runs; ``Diagnose`` (monitoring) refused in private runs unless allowed;
- ``Checkpoint``/``Restore`` in the party's own directory (what the run had charged goes with it);
  ``Finish`` writes the final local model to the party's own directory;
- one audit line per call (:mod:`dpadmm.runtime.audit`), refusals and errors included.

A refusal raises :class:`~dpadmm.privacy.policy.PolicyRefusal` with one line naming the reason.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..exceptions import DataFileError, ProtocolError
from ..privacy.events import FEATURE_COLUMN, RECORD_REPLACE
from ..privacy.dataset_identity import data_set_id
from ..privacy.ledger_store import LEDGER_ENV, LedgerStore, configured
from ..privacy.party_ledger import PartyBudget, released_since
from ..privacy.policy import PartyPolicy, PolicyRefusal as _Refused, SimulationPolicy
from ..protocol.spec import check_request_arguments
from . import admission, codec
from .checkpoints import (CHECKPOINT_NAME, PREVIOUS_CHECKPOINT_NAME, atomic_write, held, install,  # noqa: F401
                          write_model)
from .audit import AuditLog, end_line, state_line
from . import rounds
from .rounds import SeededGenerator

#: a run whose coordinator sent nothing for this long may be replaced by another coordinator's Setup
RUN_IDLE_SECONDS = 900.0


class PartyRuntime:
    """One party's state machine, independent of any transport (so it is easy to test, to audit and to host).

    ``policy`` (:class:`~dpadmm.privacy.policy.PartyPolicy`) is its operator's privacy policy; the flags
    ``private_only``, ``max_rounds``, ``max_epsilon``/``delta``, ``min_noise_multiplier`` set its fields. A
    runtime built without a budget or ``private_only`` checks nothing privacy-related (a simulation); the
    CLI (``dpadmm party serve``) never builds one silently: it needs a budget or ``--no-budget``.
    ``data``: the party's own files (key → path); ``out``: its own directory (audit log, ledger, checkpoint,
    final model).
    """

    #: the calls a party serves (a transport may add its own, e.g. a peer-to-peer node's Run and Poll)
    methods = ("Hello", "Setup", "Step", "Request", "Diagnose", "Checkpoint", "Restore", "Finish")

    def __init__(self, *, name: str, protocol, data: Mapping[str, str], out, allow_monitoring: bool = False,
                 describe_options: Mapping[str, Any] = None, accept_coordinator_data: bool = False, echo=None,
                 allow_seeded_noise: bool = False, requests=None, private_only: bool = False,
                 max_rounds: int | None = None, max_epsilon: float | None = None, delta: float | None = None,
                 min_noise_multiplier: float | None = None, policy: PartyPolicy | None = None):
        self.name = name
        protos = list(protocol) if isinstance(protocol, (list, tuple)) else [protocol]
        self.protocols = {p.name: p for p in protos}  # a party may serve several (e.g. statistics, then ADMM)
        self.protocol = protos[0]
        self.data = {k: Path(v) for k, v in data.items()}
        self.out = None if out is None else Path(out)  # None: a simulated party (SimulationPolicy), nothing on disk
        if self.out is not None:
            self.out.mkdir(parents=True, exist_ok=True)
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
        #: a simulated party (SimulationPolicy): seeded noise, the driver's data, monitoring and every declared request
        #: allowed; no policy hooks, no directory; may be stepped together with its protocol's other parties
        self.simulation = isinstance(self.policy, SimulationPolicy)
        if self.simulation:
            self.allow_monitoring = self.accept_coordinator_data = self.allow_seeded_noise = True
        elif self.out is None:
            raise DataFileError(f"party {name!r} needs a directory of its own (its audit log and ledger).")
        self.private_only = self.policy.private_work
        self.max_rounds = self.policy.max_rounds
        self.steps = 0
        # the organisation's ledger store (required with a budget; else used if configured: PSI caps per data set)
        self.store = self.data_set = None
        if not self.simulation and (self.policy.budgeted or self.policy.ledger or os.environ.get(LEDGER_ENV)):
            self.store = LedgerStore(*configured(self.policy.ledger, self.policy.ledger_key), party=name)
            self.data_set = data_set_id(name, self.data, self.policy.data_set)
        # the party's own privacy budget (None: no cap; the coordinator's report is then the only account)
        self.budget = None if not self.policy.budgeted else PartyBudget(
            Path(out), name, self.policy.max_epsilon, self.policy.delta, store=self.store, identity=self.data_set)
        self._budget_note = None
        self.echo = echo  # e.g. print to stderr: refusals and errors, one line each, at the party's side too
        self.describe_options = dict(describe_options or {})
        self.allowed_types = codec.allow_list([t for p in protos for t in p.types])
        self.lock = threading.Lock()
        # the operator's policy, once per start (a simulated party keeps no log: the driver holds everything)
        self._audit = None if self.out is None else AuditLog(self.out, name, self.policy)
        self.audit_path = None if self._audit is None else self._audit.path
        #: where the party keeps its own checkpoints (a simulated party's: the driver's directory, set per call)
        self.checkpoint_dir = None if self.out is None else self.out / "checkpoint"
        self.finished = threading.Event()
        self._seen_peers: set = set()  # callers seen (a new one is logged once: "connected")
        self.ended = ""  # what the last Finish did, in words (its log line)
        self._caller = ""  # the verified name of the call being served ("" without identities)
        self._last_call = time.monotonic()
        self.streams: tuple = ()  # a simulated block of members: one seeded stream each (backends.base.PartySpec)
        self._reset()
        self.facts = {}
        for key, path in self.data.items():
            if not path.is_file():
                raise DataFileError(f"party {name!r}: data file {key}={path} not found; check --data.")
            desc = next((p.describe for p in protos if p.describe is not None), None)
            self.facts[key] = desc(path, **self.describe_options) if desc else {}

    def _reset(self):
        self.run_id = ""
        self.run_by = ""  # who set up the run in progress (its Setup's verified caller)
        self.declared_rounds = None
        if self.budget is not None:
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
        """Append one line to the party's audit log (:class:`~dpadmm.runtime.audit.AuditLog`)."""
        if self._audit is not None:
            self._audit.write(peer, method, status, detail, request, reply, nbytes, budget)

    def refused(self, peer: str, method: str, exc: _Refused, request=None, nbytes: int = 0) -> None:
        """Audit (and echo) a refusal of ``method`` from ``peer``."""
        self.audit(peer, method, "refused", str(exc), request, nbytes=nbytes, budget=exc.budget)
        if self.echo is not None:
            self.echo(f"refused {method} from {peer or '(insecure)'}: {exc}")

    # ---------------------------------------------------------------- dispatch
    def call(self, method: str, request, peer: str = "", *, nbytes: int = 0, encode=None):
        """Serve one call (``request``: the decoded message) and return its reply (``encode(reply)`` if given,
        e.g. the wire bytes); one audit line either way. Raises :class:`PolicyRefusal` or the error."""
        note = None
        try:
            if method not in self.methods:
                raise _Refused(f"party {self.name!r} serves no method {method} (only {', '.join(self.methods)})",
                               "INVALID_ARGUMENT")
            if not isinstance(request, dict):
                raise _Refused(f"party {self.name!r} refused {method}: the request must be a mapping", "INVALID_ARGUMENT")
            with self.lock:  # the budget decision is read under the lock: calls arrive on several threads
                self._budget_note = None
                self._caller = peer
                if method != "Hello" and self._other_run() and not (method == "Setup" and self._idle()):
                    # verified names only: a run belongs to the coordinator that set it up (REDTEAM issue 36)
                    raise _Refused(f"party {self.name!r} refused {method} from {peer} and sent nothing"
                                   f"{self._other_run()}; one coordinator per run", "FAILED_PRECONDITION")
                self._last_call = time.monotonic()
                reply = getattr(self, "_" + method.lower())(request)
                note = self._budget_note
            data = reply if encode is None else encode(reply)
        except _Refused as exc:
            self.refused(peer, method, exc, request, nbytes)
            raise
        except Exception as exc:
            reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            self.audit(peer, method, "error", reason, request, nbytes=nbytes)
            if self.echo is not None:
                self.echo(f"error in {method}: {reason}")
            raise
        self.audit(peer, method, "ok", "", request, reply, nbytes=nbytes, budget=note)
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
        if proto.alignment or self.simulation:
            return set(proto.handlers)
        base = set(proto.handlers) - {"refit"} if self.requests is None else self.requests
        return base & set(proto.handlers)

    def _hello(self, req):
        return {"name": self.name, "protocol": self.protocol.name, "protocols": sorted(self.protocols),
                "data": self.facts,
                "requests": sorted(set().union(*(self._served(p) for p in self.protocols.values()))),
                "monitoring_in_private_runs": self.allow_monitoring}

    def _idle(self) -> bool:
        """The run in progress has heard nothing from its coordinator for RUN_IDLE_SECONDS: another may set up."""
        return time.monotonic() - self._last_call > RUN_IDLE_SECONDS

    def _other_run(self) -> str:
        """A refusal's tail when the caller is not who set up the run in progress (verified names only)."""
        if self.run_by and self.cfg is not None and self._caller and self._caller != self.run_by:
            return f"; another coordinator's run is in progress here (run by {self.run_by})"
        return ""

    def _setup(self, req):
        raw, seed = admission.check_request(self, req)
        args = admission.localise_setup(self, raw)  # the protocol's Setup record, the party's own data in it
        self._reset()
        self.cfg, self.state = self.protocol.setup(**args._asdict())
        self.index = int(req.get("index", 0))
        self.noise_seed = None if seed is None else int(seed)
        # party-local entropy: made here from the OS, never sent anywhere
        self.rng = np.random.default_rng() if self.noise_seed is None else None
        self.private = bool(self.protocol.private(self.cfg)) if self.protocol.private else False
        self.run_id = f"{datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}/{os.urandom(4).hex()}"
        self.run_by = self._caller
        try:
            self._budget_note = self._admit(req, args)
        except Exception:
            self._reset()
            raise
        return {"private": self.private, "noise_source": "party-local" if self.noise_seed is None else "seeded",
                "policy": "budgeted" if self.budget is not None else ("private-only" if self.private_only else
                                                                      "no budget")}

    def _admit(self, req, args) -> dict | None:
        return admission.admit(self, req, args)

    def _checkpoints(self, method: str) -> Path:
        if self.checkpoint_dir is None:
            raise _Refused(f"party {self.name!r} refused {method}: it has no directory for its checkpoints",
                           "FAILED_PRECONDITION")
        return self.checkpoint_dir

    def _generator(self, t: int):
        if self.rng is not None:
            return self.rng
        if self.streams:  # a simulated block: member k's stream as if it were a party of its own
            return tuple(SeededGenerator(self.noise_seed, (s, t)) for s in self.streams)
        return SeededGenerator(self.noise_seed, (self.index, t))

    def _step(self, req):
        self._need_setup("Step")
        t = rounds.next_round(self, req.get("round"))
        state, outbox, events = self.protocol.step(self.cfg, self.state, req["inbox"], rng=self._generator(t))
        return rounds.served(self, t, state, outbox, events)

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
        try:  # by name (the handler's parameters), never a positional list
            arguments = check_request_arguments(fn, handler, req.get("arguments", {}), positional="args" in req)
        except ProtocolError as exc:
            raise _Refused(f"party {self.name!r} refused request {handler!r}: {exc}", "INVALID_ARGUMENT") from None
        try:
            return {"value": fn(self.cfg, self.state, **arguments)}
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
        t = req.get("round")
        if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or t != self.rounds - 1 or t < 0:
            # the party's own last served round, never the coordinator's choice: a checkpoint at another round
            # (negative, earlier) would let a Restore serve rounds again (REDTEAM_POLICY R2)
            last = (f"its last served round is {self.rounds - 1}" if self.rounds > 0 else
                    "it has served no round of this run yet")
            raise _Refused(f"party {self.name!r} refused Checkpoint at round {t!r} and wrote nothing: {last} (a "
                           "checkpoint holds the party's own last round)", "INVALID_ARGUMENT")
        t = int(t)
        ck = {"protocol": self.protocol.name, "party": self.name, "round": t, "state": self.state, "by": self.run_by}
        if self.budget is not None and self.budget.run is not None:  # what this run had charged at the checkpoint
            ck["ledger_run"] = {"run": self.run_id, "charged": json.loads(json.dumps(self.budget.run["charged"]))}
        blob = codec.encode(ck, allowed=self.allowed_types)
        install(self._checkpoints("Checkpoint"), blob)
        return {"round": t}

    def _restore(self, req):
        self._need_setup("Restore")
        t = req.get("round")
        if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or t < 0:
            raise _Refused(f"party {self.name!r} refused Restore at round {t!r}: a round number is a non-negative "
                           "integer (the round of the party's own checkpoint)", "INVALID_ARGUMENT")
        t = int(t)
        if self.rounds != 0 or self.steps != 0:  # rounds served since this Setup (or a Restore already done)
            raise _Refused(f"party {self.name!r} refused Restore at round {t}: another coordinator's run is in progress "
                           f"here (run by {self.run_by or '(insecure)'}, next round {self.rounds}) — a restore comes "
                           "once, right after Setup; one coordinator per run", "FAILED_PRECONDITION")
        kept = [codec.decode(blob, allowed=self.allowed_types) for blob in held(self._checkpoints("Restore"))]
        if not kept:
            raise _Refused(f"party {self.name!r} has no checkpoint of its own; resume needs every party's own "
                           "checkpoint from the same run", "FAILED_PRECONDITION")
        # the last one, or the one before when the coordinator's last complete checkpoint is that one (or this
        # party was killed between its two renames, leaving only the one before)
        ck = next((c for c in kept if c.get("round") == t), kept[0])
        own = ck.get("round")
        if isinstance(own, bool) or not isinstance(own, (int, np.integer)) or own < 0:
            raise _Refused(f"party {self.name!r} refused Restore: its checkpoint holds no valid round ({own!r}); "
                           "restart the run from Setup", "FAILED_PRECONDITION")
        if own != t or ck.get("protocol") != self.protocol.name or ck.get("party") != self.name:
            raise _Refused(f"party {self.name!r} refused Restore at round {t}: its own checkpoint is from round "
                           f"{own} (it restores only its own checkpoints); restart every side from the same run",
                           "FAILED_PRECONDITION")
        if ck.get("by") and self._caller and ck["by"] != self._caller:
            raise _Refused(f"party {self.name!r} refused Restore from {self._caller}: its checkpoint is of a run by "
                           f"{ck['by']} (a run belongs to the coordinator that set it up)", "PERMISSION_DENIED")
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
        rel = {"feature_column": FEATURE_COLUMN}.get(run.get("relation"), RECORD_REPLACE)
        return released_since(run, info.get("charged", {}), self.name, rel, t)

    def _finish(self, req):
        written = None
        if self.cfg is not None and req.get("completed") and self.protocol.model is not None and self.out is not None:
            meta = {"party": self.name, "protocol": self.protocol.name, "rounds": self.rounds, "private": self.private,
                    "noise_source": "party-local" if self.noise_seed is None else "seeded"}
            written = write_model(self.out, self.protocol.model(self.cfg, self.state), meta)
        self.ended = end_line(self.protocol.name, bool(req.get("completed")), self.protocol.model is not None, written,
                              self.cfg is not None)
        self._reset()
        self.finished.set()
        return {"written": written}

    def close(self):
        if self.budget is not None:
            self.budget.close()
        if self.store is not None:
            self.store.close()
        if self._audit is not None:
            self._audit.close()
