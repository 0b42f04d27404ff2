"""The one fit runner: typed party setups → a backend → start → run → (declared requests) → close.

Every estimator and CLI command hands its run here instead of driving a backend itself (a test in
``tests/unit/test_architecture.py`` says so): the backend is started with the parties' setups (under the engine's
BLAS cap unless the caller asks otherwise), the rounds run — the engine's round loop (:func:`run`) or a protocol's
own driver (:func:`session`) — the declared requests after training run on the still-open backend (``after``), and
the backend is closed whatever happens. What comes back is typed: the engine's :class:`~dpadmm.engine.RunResult`
(history, ledger, the hub's final state) and whatever ``after`` returned; the estimator turns it into attributes
and the algorithm's ``report`` module into the privacy report.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any, Callable, Generic, Sequence, TypeVar

from .. import engine
from ..backends.base import PartySpec

T = TypeVar("T")


@dataclass
class Fitted(Generic[T]):
    """One run: ``result`` (the engine's, or what a protocol's own driver returned), ``after`` (what the requests
    after training returned; None without them) and ``setup_seconds`` (the parties' setup, before round 1)."""

    result: T
    after: Any = None
    setup_seconds: float = 0.0


def session(backend, parties: Sequence[PartySpec], drive: Callable[[Any], T], *, noise_seed: int | None = None,
            rounds: int | None = None, after: Callable[[Any, T], Any] | None = None, close: bool = True,
            blas_threads: int | None = 1) -> Fitted[T]:
    """Start ``backend`` with ``parties``, call ``drive(backend)`` (the rounds), then ``after(backend, result)``
    (declared requests on the open backend), and close the backend — also when a step fails.

    ``rounds``: the run's declared number of rounds (a party with its own budget prices the whole run at Setup).
    ``blas_threads``: the BLAS cap of the parties' setup (:func:`dpadmm.engine.start`; None leaves BLAS alone) and of
    ``after`` (a label party's refit is dense linear algebra: uncapped, its BLAS threads fought the machine's other
    work and took 24× the CPU seconds of one thread).
    ``close=False`` only where the caller keeps the backend for scoring afterwards (it closes it itself)."""
    t0 = time.perf_counter()
    engine.start(backend, parties, noise_seed=noise_seed, rounds=rounds, blas_threads=blas_threads)
    setup = time.perf_counter() - t0
    try:
        result = drive(backend)
        extra = None
        if after is not None:
            with engine.blas_cap(blas_threads):
                extra = after(backend, result)
    finally:
        if close:
            backend.close()
    return Fitted(result, extra, setup)


def run(backend, parties: Sequence[PartySpec], hub: engine.Hub, *, rounds: int, noise_seed: int | None = None,
        after: Callable[[Any, engine.RunResult], Any] | None = None, on_started: Callable[[Any], None] | None = None,
        declared_rounds: int | None = None, **engine_options) -> Fitted[engine.RunResult]:
    """The engine's round loop as one run: ``rounds`` rounds of ``hub`` with ``parties`` on ``backend``.

    ``engine_options`` go to :func:`dpadmm.engine.run` (callbacks, monitor, stop_on_convergence, checkpoints,
    transcript, neighbours). ``on_started(backend)``: called once the parties are set up, before round 1 (the
    estimator reads the backend's declared capabilities there). ``declared_rounds``: the rounds declared at Setup when
    ``after`` steps more than the loop's ``rounds`` (a protocol's declared stage after them, e.g. the gossip
    validation; None: ``rounds``)."""

    def drive(b):
        if on_started is not None:
            on_started(b)
        return engine.run(hub=hub, parties=parties, backend=b, rounds=rounds, noise_seed=noise_seed, started=True,
                          **engine_options)

    return session(backend, parties, drive, noise_seed=noise_seed, rounds=declared_rounds or rounds, after=after)


@contextlib.contextmanager
def owned(backend):
    """The backend of a command that spans several sessions on the same parties (PSI, then a run or scoring, each
    a :func:`session` with ``close=False``): yields it and closes it on exit, also when a session fails."""
    try:
        yield backend
    finally:
        backend.close()


__all__ = ["Fitted", "owned", "run", "session"]
