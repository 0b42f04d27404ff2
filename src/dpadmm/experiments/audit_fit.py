"""Plumbing of the whole-fit rows of ``dpadmm audit --end-to-end`` (:mod:`.audit_e2e`): a row's neighbouring pairs,
the capture of every protocol message a real fit sends (a transcript hook on ``engine.run``), the memoised accountant,
and :func:`audit_row`, which runs a row's whole fit many times on each side and bounds ε from below."""

from __future__ import annotations

import contextlib
import sys
import time
import warnings
import zlib
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, ContextManager, Sequence
from unittest import mock

import numpy as np
from threadpoolctl import threadpool_limits

from .. import engine
from ..privacy.accountants import gaussian as gaussian_accountant
from ..privacy.audit import AuditResult
from ..privacy.audit_e2e import Subspace, audit_views

@dataclass
class Pair:
    """Neighbouring datasets (in whatever form the row's ``fit`` takes) and the subspaces to test."""

    name: str
    data0: Any
    data1: Any
    note: str = ""
    subspaces: tuple[Subspace, ...] = ()


@dataclass
class Row:
    """One audited (mechanism, relation): ``fit(data, seed) -> (view, report)`` runs one whole fit."""

    name: str
    algorithm: str
    relation: str
    adversary: str
    fit: Callable[[Any, int], tuple[np.ndarray, Any]]
    pairs: Sequence[Pair]
    broken: bool = False
    bug: str = ""
    patch: Callable[[], ContextManager] | None = None
    description: str = ""
    claim: Callable[[Any], tuple[float, float]] | None = None  # default: the report's (epsilon, delta)
    # model-based statistics: (pair, raws on D, raws on D') -> {name: (scores on D, scores on D')}; a
    # fit then returns (view, report, raw) with ``raw`` whatever the model needs of that run
    model: Callable[[Pair, list, list], dict] | None = None
    runs_factor: int = 1  # this row runs ``runs_factor`` × the requested runs (cheap, tight instances)
    full_only: bool = False  # left out of ``--quick``


@contextlib.contextmanager
def _capture(senders: Sequence[str] | None = None, receivers: Sequence[str] | None = None):
    """Record protocol messages during the fits inside the block: every message a party sends
    (``senders``: only those parties), or with ``receivers`` every message the hub sends them.

    Wraps ``dpadmm.engine.run`` (which every estimator calls) and hands it a transcript hook, so the
    record is what crossed the party boundary in the real run. Yields a list of
    ``(round, sender, receiver, message)``.
    """
    record: list = []
    real_run = engine.run

    def hook(round_, sender, receiver, message, kind):
        if kind != "protocol":
            return
        if receivers is not None:
            if sender == engine.HUB and receiver in receivers:
                record.append((round_, sender, receiver, message))
        elif sender != engine.HUB and (senders is None or sender in senders):
            record.append((round_, sender, receiver, message))

    def run(*args, **kwargs):
        outer = kwargs.get("transcript")
        kwargs.setdefault("blas_threads", None)  # the audit limits BLAS threads once, around all runs

        def both(*a):
            hook(*a)
            if outer is not None:
                outer(*a)

        kwargs["transcript"] = both
        return real_run(*args, **kwargs)

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(engine, "run", run))
        real_start = getattr(engine, "start", None)
        if real_start is not None:  # the engine's backend start also caps BLAS per call: the audit caps once
            stack.enter_context(mock.patch.object(
                engine, "start", lambda *a, **k: real_start(*a, **dict({"blas_threads": None}, **k))))
        yield record


@contextlib.contextmanager
def _fast_accounting():
    """Memoise the Gaussian accountant and its calibration during the audit.

    Both are pure functions of (noise multipliers, δ, rounds, method) — the same for every run of a
    row — and a PLD composition costs more than a whole small fit. Every module-level reference
    to them in a loaded ``dpadmm`` module is patched, so the estimators' own code calls the cache.
    """
    patches = []
    for fname in ("gaussian_epsilon", "calibrate_noise_multiplier"):
        real = getattr(gaussian_accountant, fname)
        cached = lru_cache(maxsize=256)(lambda *a, _f=real: _f(list(a[0]) if isinstance(a[0], tuple) else a[0], *a[1:]))

        def fast(first, *rest, _c=cached, _f=real, **kw):
            if kw:
                return _f(first, *rest, **kw)
            key = tuple(float(v) for v in first) if isinstance(first, (list, tuple, np.ndarray)) else first
            return _c(key, *rest)

        for mod in list(sys.modules.values()):
            if getattr(mod, "__name__", "").startswith("dpadmm") and getattr(mod, fname, None) is real:
                patches.append(mock.patch.object(mod, fname, fast))
    with contextlib.ExitStack() as stack:
        for p in patches:
            stack.enter_context(p)
        yield


def _seeded(est, seed: int):
    """Seed the estimator's noise (whichever parameter name it takes): a reproducible simulation."""
    params = est.get_params()
    key = "noise_seed" if "noise_seed" in params else "random_state"
    return est.set_params(**{key: int(seed)})


def _claim(report) -> tuple[float, float]:
    eps = float(report.epsilon)
    return eps, float(report.delta)


def audit_row(row: Row, *, runs: int, seed: int = 0, confidence: float = 0.95, progress=None) -> AuditResult:
    """Run ``row``'s whole fit ``runs`` times on each side of each neighbouring pair and bound ε.

    The confidence is split evenly over the pairs (Bonferroni), so the row's bound — the largest
    over its pairs — holds with probability ≥ ``confidence``.
    """
    alpha = (1.0 - confidence) / len(row.pairs)
    runs = int(runs) * int(row.runs_factor)
    ss = np.random.SeedSequence([seed, zlib.crc32(row.name.encode())])
    details, best, claim, delta, blocks = [], 0.0, None, None, None
    t0 = time.perf_counter()
    ctx = row.patch() if row.patch is not None else contextlib.nullcontext()
    with ctx, _fast_accounting(), threadpool_limits(1, user_api="blas"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for pi, pair in enumerate(row.pairs):
            seeds = ss.spawn(1)[0].generate_state(2 * runs, dtype=np.uint32)
            views, raws = [], []
            for side, data in enumerate((pair.data0, pair.data1)):
                vs, rs = [], []
                for r in range(runs):
                    out = row.fit(data, int(seeds[side * runs + r]))
                    v, report = out[0], out[1]
                    if row.model is not None:
                        rs.append(out[2])
                    if isinstance(v, dict):  # named blocks of the view
                        blocks, start = {}, 0
                        for k, part in v.items():
                            blocks[k] = slice(start, start + np.size(part))
                            start += np.size(part)
                        v = np.concatenate([np.ravel(part) for part in v.values()])
                    vs.append(v)
                    eps_r, delta_r = (row.claim or _claim)(report)
                    if claim is None:
                        claim, delta = eps_r, delta_r
                    # neighbours get the same claim (the fits' noise does not depend on the data)
                    claim, delta = max(claim, eps_r), max(delta, delta_r)
                views.append(np.stack(vs))
                raws.append(rs)
            extra0 = extra1 = None
            if row.model is not None:
                model = row.model(pair, raws[0], raws[1])
                extra0 = {k: v[0] for k, v in model.items()}
                extra1 = {k: v[1] for k, v in model.items()}
            res = audit_views(views[0], views[1], delta=delta, alpha=alpha, subspaces=pair.subspaces,
                              blocks=blocks, extra0=extra0, extra1=extra1)
            res.update(pair=pair.name, note=pair.note)
            details.append(res)
            best = max(best, res["epsilon_lower_bound"])
            if progress:
                progress(f"{row.name} / {pair.name}: lower bound {res['epsilon_lower_bound']:.2f} "
                         f"({res['statistic']}), claimed {claim:.2f}")
    return AuditResult(
        name=row.name, epsilon_claimed=float(claim), epsilon_lower_bound=float(best), delta=float(delta),
        broken=row.broken, samples=int(runs), confidence=float(confidence), caught=bool(best > claim),
        description=row.description,
        details={"end_to_end": True, "algorithm": row.algorithm, "relation": row.relation,
                 "adversary_view": row.adversary, "planted_bug": row.bug or None, "runs_per_dataset": runs,
                 "seconds": round(time.perf_counter() - t0, 1), "pairs": details,
                 "ratio": float(best / claim) if claim else None},
    )


def _unit_rows(A: np.ndarray) -> np.ndarray:
    return A / np.linalg.norm(A, axis=1, keepdims=True)


def _orth(A: np.ndarray) -> np.ndarray:
    U, s, _ = np.linalg.svd(A, full_matrices=False)
    return U[:, s > 1e-10 * s[0]]
