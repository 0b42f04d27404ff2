"""The one round loop shared by every algorithm.

A run is a ``Hub`` (the coordinator, central machine, or neighbour router, run by the driver)
and a list of ``PartySpec`` run by a backend. Each round:

1. the backend runs every party's ``step`` on its inbox; each party draws its noise from its own
   generator, made inside its worker from OS entropy (``noise_seed=None``, the private default)
   or, in a seeded simulation, from ``SeedSequence(noise_seed, spawn_key=(party_index, round))``;
2. the hub's ``step`` consumes the outboxes and produces the next inboxes;
3. privacy events of both go into the ``PrivacyLedger``;
4. if monitoring is on and due, parties' ``diagnose`` values and the hub's ``metrics`` are
   recorded (monitoring values leave the parties un-noised: private fits leave it off unless the
   user opts in);
5. callbacks run (progress bars, early stopping); checkpoints are written every k rounds: the
   driver's file holds the hub's state, inboxes, ledger and history; every party writes its own
   state where it lives (``Backend.checkpoint``). Between checkpoints the driver appends each round's
   privacy events to ``released.jsonl`` beside its checkpoint (O(1) per round): a resumed run
   releases the rounds after the last checkpoint again, and its ledger counts them twice, as the
   parties' own ledgers do (a party with a ledger hands its own count back at ``restore``).

``transcript(round, sender, receiver, message, kind)`` (optional) sees every payload that crosses
a party boundary: the hub's inboxes and the parties' outboxes (``kind="protocol"``) and, when
monitoring, the parties' diagnostics (``kind="monitoring"``). A backend's
:class:`~dpadmm.exceptions.PartyFailureError` is re-raised with the round it happened in.

Only steps 1–2 are timed (``history["seconds"]``): monitoring is not part of training cost.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import os
import pickle
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import threadpoolctl
from threadpoolctl import ThreadpoolController

from .backends.base import Backend, PartySpec, atomic_pickle, noise_source, party_rng  # noqa: F401 (re-export)
from .exceptions import DataFileError, InvalidParameterError, PartyFailureError
from .privacy.ledger import PrivacyLedger
from .runtime import codec


@dataclass(frozen=True)
class Hub:
    """The driver-side role of an algorithm.

    ``init(cfg) -> (state, inboxes)``; ``step(cfg, state, outboxes, *, rng) -> (state, inboxes, events)``;
    ``metrics(cfg, state, diagnostics) -> dict`` (may include ``converged: bool``).
    ``metrics_every``: monitor every k rounds (and always at the last round).
    ``random=False``: the hub's step draws nothing (a router): it gets ``rng=None``, and a seeded run builds no
    generator for it each round (the parties' streams do not depend on it).
    """

    cfg: Any
    init: Callable
    step: Callable
    metrics: Callable | None = None
    metrics_every: int = 1
    random: bool = True
    converged: Callable | None = None  # (cfg, state) -> bool: a stopping test on released values, every round


@dataclass
class RunResult:
    """What the engine returns: per-round history, the ledger, the hub's final state."""

    history: dict[str, list] = field(default_factory=dict)
    ledger: PrivacyLedger = field(default_factory=PrivacyLedger)
    hub_state: Any = None
    rounds: int = 0
    converged: bool = False
    wall_seconds: float = 0.0
    noise_source: str = "party-local"


CHECKPOINT_FILE = "checkpoint.pkl"
RELEASED_FILE = "released.jsonl"  # privacy events of the rounds after the last checkpoint (one line per round)
HUB = "hub"  # the hub's name in transcripts


def _at_round(exc: PartyFailureError, round_: int) -> PartyFailureError:
    """The same failure, with the round it happened in (message: party, round, reason)."""
    if getattr(exc, "round", None) is not None:
        return exc
    party = getattr(exc, "party", None)
    reason = getattr(exc, "reason", str(exc))
    msg = f"party {party!r} failed in round {round_}: {reason}" if party else f"round {round_}: {reason}"
    new = PartyFailureError(msg)
    new.party, new.round, new.reason = party, round_, reason
    new.remote_traceback = getattr(exc, "remote_traceback", None)
    return new


class _Controller(ThreadpoolController):
    """threadpoolctl's controller of the loaded BLAS/OpenMP libraries, found with a seventh of the file-system calls.

    threadpoolctl resolves every loaded shared library's path (``os.path.realpath``: one ``lstat`` per path
    component, ~250 libraries in a CLI process: most of the ~15 ms a search takes) and then keeps those whose
    resolved file name starts with a supported library's prefix (``libopenblas``, ``libmkl_rt``, ``libgomp``, …).
    The resolved file name is the path's own unless its last component is a symbolic link (resolving the folders
    above it changes the folder, not the name), so a library whose name matches no prefix and that is not a link
    cannot match: it is skipped before the resolution, every other path goes through threadpoolctl's own
    (``tests/unit/test_engine_blas.py`` checks the libraries found are threadpoolctl's). If threadpoolctl no longer
    lists its controllers, nothing is skipped."""

    def __init__(self) -> None:
        self._prefixes = tuple(p for c in getattr(threadpoolctl, "_ALL_CONTROLLERS", ()) for p in c.filename_prefixes)
        super().__init__()

    def _make_controller_from_path(self, filepath):
        if self._prefixes and not (os.path.basename(filepath).lower().startswith(self._prefixes)
                                   or os.path.islink(filepath)):
            return
        super()._make_controller_from_path(filepath)


class _BlasLibraries:
    """The controller of the BLAS libraries loaded in this process (:class:`_Controller`), found once and found
    again only when a module was imported since (a new extension module may have brought another BLAS). Limiting
    them is cheap."""

    def __init__(self) -> None:
        self.controller: ThreadpoolController | None = None
        self.modules = -1

    def limit(self, threads: int):
        if self.controller is None or len(sys.modules) != self.modules:
            self.controller, self.modules = _Controller(), len(sys.modules)
        return self.controller.limit(limits=threads, user_api="blas")


_BLAS = _BlasLibraries()


def blas_cap(threads: int | None):
    """The BLAS cap of :func:`run` and :func:`start` as a context (None: BLAS left alone), e.g. around a refit."""
    return contextlib.nullcontext() if threads is None else _BLAS.limit(threads)


def _blas_limited(fn):
    """Let ``run`` take ``blas_threads`` (default 1): the cap on BLAS threads during the loop.

    The per-round work is level-1/2 BLAS on vectors, where threading only adds synchronisation
    cost — and on a busy machine spin-waiting made a9a iterations 5× slower. ``None`` leaves
    BLAS alone.
    """
    @functools.wraps(fn)
    def wrapper(*args, blas_threads: int | None = 1, **kwargs):
        with blas_cap(blas_threads):
            return fn(*args, **kwargs)

    return wrapper


@_blas_limited
def start(backend: Backend, parties: Sequence[PartySpec], *, noise_seed: int | None = None,
          rounds: int | None = None) -> float:
    """Start ``backend`` with ``parties`` under the same BLAS cap as :func:`run` (``blas_threads``,
    default 1) and return the seconds it took. ``rounds``: the run's declared number of rounds (a
    party with its own budget prices the whole run at Setup).

    Party setup (validation, factorisations, the column norms of a cg solver) is part of the cost
    of a fit; on a busy machine uncapped BLAS threads made it over 10× slower.
    """
    t0 = time.perf_counter()
    backend.start(parties, noise_seed=noise_seed, rounds=rounds)
    return time.perf_counter() - t0


@_blas_limited
def run(
    *,
    hub: Hub,
    parties: Sequence[PartySpec],
    backend: Backend,
    rounds: int,
    noise_seed: int | None = None,
    callbacks: Sequence[Callable[[int, dict], bool | None]] = (),
    monitor: bool = True,
    stop_on_convergence: bool = True,
    checkpoint_every: int | None = None,
    checkpoint_dir: str | os.PathLike | None = None,
    resume_from: str | os.PathLike | None = None,
    started: bool = False,
    transcript: Callable[[int, str, str, Any, str], None] | None = None,
    neighbours: dict | None = None,
) -> RunResult:
    """Run ``rounds`` rounds of the protocol and return a :class:`RunResult`.

    ``noise_seed``: ``None`` (every party and the hub draw noise from their own OS entropy; nobody
    can regenerate it) or an int (a reproducible simulation; whoever knows it can remove the
    noise). The backend must already be started with ``parties`` (and the same ``noise_seed``) if
    ``started`` is true (the caller keeps it open afterwards for declared requests such as
    distributed scoring); otherwise it is started here.
    """
    # paths resolved here, on the driver: a party on another node (Ray) must not read them relative to
    # wherever its worker was started
    checkpoint_dir = Path(checkpoint_dir).resolve() if checkpoint_dir is not None else None
    resume_from = Path(resume_from).resolve() if resume_from is not None else None
    names = [p.name for p in parties]
    hub_index = len(names)
    if not started:
        backend.start(parties, noise_seed=noise_seed, rounds=rounds)
    if backend.peer_to_peer:
        if checkpoint_every or resume_from is not None or transcript is not None:
            raise InvalidParameterError("a peer-to-peer run has no checkpoints, resume or transcript (the coordinator "
                                        "sees no round message); run without them.")
        return _run_peer_to_peer(hub, names, backend, rounds, noise_seed=noise_seed, callbacks=callbacks,
                                 monitor=monitor, stop_on_convergence=stop_on_convergence, neighbours=neighbours)
    hub_rng = np.random.default_rng() if noise_seed is None and hub.random else None  # the hub's own entropy
    result = RunResult(noise_source=noise_source(noise_seed))
    ledger = result.ledger
    history = result.history
    state, inboxes = hub.init(hub.cfg)
    first = 0
    if resume_from is not None:
        ck = _load_checkpoint(resume_from)
        state, inboxes = ck["hub_state"], ck["inboxes"]
        try:
            again = backend.restore(_checkpoint_dir(resume_from), ck["round"])
        except PartyFailureError as exc:
            raise _at_round(exc, ck["round"] + 1) from exc
        ledger.restore(ck["events"])
        # rounds released after the checkpoint, before the crash: the resumed run releases them again. A party
        # with its own ledger says what it released (authoritative); the driver's journal says the rest
        again = again or {}
        own = set(again) | {e.party for evs in again.values() for e in evs}
        for events in again.values():
            ledger.record(events)
        ledger.record([e for e in _read_released(resume_from, ck["round"]) if e.party not in own])
        history.update({k: list(v) for k, v in ck["history"].items()})
        first = ck["round"] + 1
    elapsed = history["seconds"][-1] if history.get("seconds") else 0.0
    t_wall = time.perf_counter()
    t = first - 1
    for t in range(first, rounds):
        if transcript is not None:
            for name in names:
                transcript(t + 1, HUB, name, inboxes[name], "protocol")
        t0 = time.perf_counter()
        try:
            results = backend.step(inboxes, t)
        except PartyFailureError as exc:
            raise _at_round(exc, t + 1) from exc
        outboxes = {name: results[name][0] for name in names}
        rng = hub_rng if hub_rng is not None or not hub.random else party_rng(noise_seed, hub_index, t)
        state, inboxes, hub_events = hub.step(hub.cfg, state, outboxes, rng=rng)
        elapsed += time.perf_counter() - t0
        if transcript is not None:
            for name in names:
                transcript(t + 1, name, HUB, outboxes[name], "protocol")
        for name in names:
            ledger.record(results[name][1])
        ledger.record(hub_events)
        if checkpoint_every and checkpoint_dir:
            _append_released(checkpoint_dir, t, [e for n in names for e in results[n][1]] + list(hub_events))
        record: dict[str, Any] = {"round": t + 1, "seconds": elapsed}
        last = t == rounds - 1
        if monitor and hub.metrics is not None and ((t + 1) % hub.metrics_every == 0 or last):
            try:
                diagnostics = backend.diagnose()
            except PartyFailureError as exc:
                raise _at_round(exc, t + 1) from exc
            if transcript is not None:
                for name, diag in diagnostics.items():
                    transcript(t + 1, name, HUB, diag, "monitoring")
            record.update(hub.metrics(hub.cfg, state, diagnostics))
        stop = _notify(history, record, callbacks, t)
        if checkpoint_every and checkpoint_dir and ((t + 1) % checkpoint_every == 0 or last):
            try:
                backend.checkpoint(checkpoint_dir, t)  # each party writes its own state, where it lives
            except PartyFailureError as exc:
                raise _at_round(exc, t + 1) from exc
            atomic_pickle({  # the coordinator's own state only
                "round": t, "hub_state": state, "inboxes": inboxes, "noise_source": result.noise_source,
                "events": ledger.state(), "history": history,
            }, Path(checkpoint_dir) / CHECKPOINT_FILE)
            (Path(checkpoint_dir) / RELEASED_FILE).unlink(missing_ok=True)  # every event is in the checkpoint
        if stop_on_convergence and (record.get("converged") or hub.converged and hub.converged(hub.cfg, state)):
            result.converged = True
            stop = True
        if stop:
            break
    return _finish(result, state, t, t_wall)


def _notify(history: dict, record: dict, callbacks, t: int) -> bool:
    """Append a round's record to the history and call every callback; True if any asked to stop."""
    for key, value in record.items():
        history.setdefault(key, []).append(value)
    stop = False
    for cb in callbacks:
        stop = bool(cb(t + 1, record)) or stop
    return stop


def _finish(result: RunResult, state, t: int, t_wall: float) -> RunResult:
    result.hub_state = state
    result.rounds = t + 1
    result.wall_seconds = time.perf_counter() - t_wall
    return result


def _run_peer_to_peer(hub: Hub, names, backend, rounds: int, *, noise_seed, callbacks, monitor: bool,
                      stop_on_convergence: bool, neighbours) -> RunResult:
    """The parties ran the rounds among themselves (:meth:`GrpcBackend.run_peer_to_peer`); the hub's state is
    rebuilt from what each reported when done — its released round messages, in order, and its privacy
    events — by the same ``hub.step`` as a routed run, so history, ledger and final state are the routed
    run's (the rounds after convergence, if any, are released and counted but not replayed)."""
    result = RunResult(noise_source=noise_source(noise_seed))
    t_wall = time.perf_counter()
    reports = backend.run_peer_to_peer(rounds, monitor=monitor and hub.metrics is not None, neighbours=neighbours)
    for name in names:  # every round any node released counts, replayed or not
        for events in reports[name]["events"]:
            result.ledger.record(events)
    state, _ = hub.init(hub.cfg)
    rng = np.random.default_rng() if noise_seed is None and hub.random else None
    t = -1
    for t in range(rounds):
        outboxes = {name: reports[name]["outboxes"][t] for name in names}
        state, _, hub_events = hub.step(hub.cfg, state, outboxes,
                                        rng=rng if rng is not None or not hub.random
                                        else party_rng(noise_seed, len(names), t))
        result.ledger.record(hub_events)
        record: dict[str, Any] = {"round": t + 1, "seconds": max(float(reports[n]["seconds"][t]) for n in names)}
        if monitor and hub.metrics is not None and ((t + 1) % hub.metrics_every == 0 or t == rounds - 1):
            record.update(hub.metrics(hub.cfg, state, {n: reports[n]["history"][t] for n in names}))
        stop = _notify(result.history, record, callbacks, t)
        if stop_on_convergence and (record.get("converged") or hub.converged and hub.converged(hub.cfg, state)):
            result.converged = stop = True
        if stop:
            break
    return _finish(result, state, t, t_wall)


def _append_released(directory, round_: int, events) -> None:
    """One line per round: its privacy events (what a resume from the last checkpoint releases again), in the
    runtime's message encoding (:mod:`dpadmm.runtime.codec`, the one codec of events), base64 in a JSON line."""
    Path(directory).mkdir(parents=True, exist_ok=True)
    with open(Path(directory) / RELEASED_FILE, "a") as fh:
        fh.write(json.dumps({"round": int(round_), "events": base64.b64encode(codec.encode(list(events))).decode()})
                 + "\n")


def _read_released(path, after: int) -> list:
    """The events journaled for rounds after ``after`` (0-based) beside the checkpoint at ``path``."""
    f = _checkpoint_dir(path) / RELEASED_FILE
    if not f.is_file():
        return []
    out = []
    for line in f.read_text().splitlines():
        rec = json.loads(line)
        if int(rec["round"]) > after:
            out.extend(codec.decode(base64.b64decode(rec["events"])))
    return out


def _checkpoint_dir(path) -> Path:
    p = Path(path)
    return p if p.is_dir() else p.parent


def checkpoint_rounds(path) -> int:
    """How many rounds the checkpoint at ``path`` (its directory or its file) has done."""
    return int(_load_checkpoint(path)["round"]) + 1


def _load_checkpoint(path) -> dict:
    p = Path(path)
    if p.is_dir():
        p = p / CHECKPOINT_FILE
    if not p.is_file():
        raise DataFileError(f"no checkpoint at {p}; pass the --out/checkpoint directory of an earlier run.")
    with open(p, "rb") as fh:
        return pickle.load(fh)
