"""Worst-case audit games: the adversary of the threat model plays its strongest hand against the real
party code, and the auditor bounds ε from below with the likelihood ratio of everything it saw.

A *game* (Nasr et al. 2021/2023; Steinke, Nasr & Jagielski 2023) fixes

- a neighbouring pair chosen by the adversary: a canary row, column or label that moves the party's
  release by (close to) its full sensitivity;
- where the coordinator (hub) is the adversary, the messages it sends: an adversarial
  :class:`dpadmm.engine.Hub` drives the *real* party setup and step functions through
  :func:`dpadmm.engine.run` on any backend (in-process and seeded, or ``process``: every party in
  its own process, drawing its noise from its own OS entropy);
- how many rounds make one audited run (T): the claim is the accountant's ε of one run's events.

Every audited run is a fresh fit of T rounds, numbered from 0, on D or on D' (a bug tied to a round of the
fit fires in every run; :func:`_play`). The adversary knows the code and the
data but the canary, so for every run it replays the honest step without noise on D and on D'
(:class:`ZeroRNG`) given what it saw, and scores the run with the Gaussian log-likelihood ratio
``Σ_t Σ_p Δ_tpᵀ(x_tp − (μ⁰_tp + μ¹_tp)/2)/σ_tp²`` (Δ = μ¹ − μ⁰, σ the party's own stated σ): the
Neyman–Pearson statistic of the honest mechanism, all rounds jointly. A second statistic takes the
releases' residuals (x − midpoint) projected on the span of the Δ's — for *every* party, also those
whose data did not change — and fits a linear discriminant with their empirical covariance (on the
first quarter of the runs): noise reused across rounds or parties leaves a direction without noise
in which the neighbours still differ, and this statistic finds it; a third compares the residuals'
Gaussian likelihoods with one covariance per side (reuse whose pattern differs between the runs on D
and D', e.g. with a counter's parity, leaves that direction on one side only).

The bound (:func:`score_bound`): the Gaussian-DP fit (:func:`dpadmm.privacy.audit_gdp.gdp_lower_bound`)
of the two linear statistics and the distribution-free Clopper–Pearson bound
(:func:`dpadmm.privacy.audit.epsilon_lower_bound`) of all three, each at α/5 (Bonferroni), the largest
reported. Plants (:data:`Plant`) wrap the real step or patch a library function for the
duration of the run only — the library is not edited.
"""

from __future__ import annotations

import contextlib
import time
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager

import numpy as np

from .. import engine
from ..backends import get_backend
from ..privacy.accountants.gaussian import calibrate_noise_multiplier, gaussian_epsilon
from ..privacy.audit import AuditResult, epsilon_lower_bound
from ..privacy.audit_gdp import gdp_lower_bound, gdp_mu
from .audit_rngs import (ReplayRNG, RepeatRNG, ScaledRNG, ZeroRNG, generator_plant, plant_all,  # noqa: F401
                         planted_generators)


EPSILON, DELTA = 1.0, 1e-5  # the claim every game's configuration is calibrated to
CANARY = 0  # the index of the canary record / row


def calibrated_nm(rounds: int) -> float:
    """The noise multiplier the library calibrates for ``rounds`` releases at (EPSILON, DELTA)."""
    return calibrate_noise_multiplier(EPSILON, DELTA, rounds)


def constant_replay(means: tuple, rounds: int) -> Callable[[int, dict], tuple[np.ndarray, np.ndarray]]:
    """``Game.replay`` of a game whose noiseless releases are the same in every audited run: ``means`` = (μ⁰, μ¹),
    each (T, n) — round t's release on D and on D' — tiled over the record's runs as (R·T, 1, n)."""
    def replay(side: int, rec: dict):
        runs = rec["total"] // rounds
        return tuple(np.tile(m[:, None, :], (runs, 1, 1)) for m in means)

    return replay


# a plant: (party specs, hub) -> (party specs, hub, context manager active during the run)
Plant = Callable[[list, Any], tuple[list, Any, ContextManager]]


@dataclass
class Game:
    """One audited mechanism against its strongest adversary (module docstring)."""

    name: str
    algorithm: str
    relation: str
    adversary: str
    description: str
    rounds: int  # T: rounds of one audited run
    setup: Callable[[int, int], tuple[list, Any]]  # (side, total rounds) -> (party specs, hub)
    view: Callable[[dict], np.ndarray]  # run record -> what the adversary saw, (R·T, P, n) (P streams)
    replay: Callable[[int, dict], tuple[np.ndarray, np.ndarray]]  # (side, run record) -> (μ⁰, μ¹), (R·T, P, n)
    mechanism_party: str  # whose events make the claim
    delta: float
    plant: Plant | None = None
    broken: bool = False
    bug: str = ""
    backend: str = "inprocess"
    runs_factor: int = 5
    max_runs: int | None = None  # cap on runs per side (planted rows: far above their claim at a few thousand)
    full_only: bool = False
    note: str = ""
    extra: dict = field(default_factory=dict)
    runner: Callable[..., AuditResult] | None = None  # a game that is no engine run plays itself (same arguments)
    last_inbox: bool = False  # the view holds the hub's messages after the last round (one more engine round)
    # a game whose runs are no engine run but are scored like one: (game, side, runs, seed) -> the record
    # :func:`_play` returns ("trials": each run's record for ``view``/``replay``, "events", "total")
    player: Callable[..., dict] | None = None


def _engine_run(game: Game, side: int, rounds: int, seed: int | None, backend) -> dict:
    """One engine run of ``rounds`` rounds on side 0 (D) or 1 (D'): every message in order (party names, and
    ``"hub->name"``: index 0 the first inbox) and the mechanism party's events."""
    specs, hub = game.setup(side, rounds)
    ctx: ContextManager = contextlib.nullcontext()
    if game.plant is not None:  # a fresh plant per run: whatever it keeps (a counter, a stored draw) is the fit's
        specs, hub, ctx = game.plant(specs, hub)
    wrap = generator_plant() if game.backend == "inprocess" else None
    if wrap is not None:  # ``dpadmm audit --plant``: every generator of the fit
        specs, hub = plant_all(specs, hub, wrap)
    streams: dict[str, list] = {}

    def hook(round_, sender, receiver, message, kind):
        if kind == "protocol":
            streams.setdefault(f"hub->{receiver}" if sender == engine.HUB else sender, []).append(message)

    with ctx:
        # with last_inbox one extra round: the hub's last messages reach the transcript only when the next round starts
        res = engine.run(hub=hub, parties=specs, backend=backend, rounds=rounds + int(game.last_inbox),
                         noise_seed=seed, monitor=False,
                         stop_on_convergence=False, transcript=hook, blas_threads=None)
    events = [e for e in res.ledger.events if getattr(e, "party", None) == game.mechanism_party
              or str(getattr(e, "party", "")).startswith(game.mechanism_party + "[")]
    return {"streams": streams, "events": events[:rounds], "total": rounds}


def _play(game: Game, side: int, runs: int, seed: int | None) -> dict:
    """``runs`` audited runs on side 0 (D) or 1 (D'); returns what the adversary saw.

    In process (seeded), every audited run is a fresh fit: its own engine run, setup and plant, its rounds
    numbered from 0 — so a bug tied to a round of the fit (round 1's draw reused in round 2) fires in every run,
    as it would in every real fit. On another backend (party-local entropy: an honest row of the process path)
    one engine run plays ``runs × T`` rounds, every block of T rounds one audited run (the hub resets what it
    controls at each block; the parties' state and round numbers carry on). ``trials`` holds each audited run's
    record; ``streams`` the parties' messages of all of them in order (T each) and ``events`` theirs."""
    T = game.rounds
    backend = get_backend(game.backend)
    try:
        if game.backend == "inprocess":
            seeds = (np.random.SeedSequence(seed).generate_state(runs) if seed is not None else [None] * runs)
            trials = [_engine_run(game, side, T, None if s is None else int(s), backend) for s in seeds]
        else:
            trials = [_engine_run(game, side, runs * T, seed, backend)]
    finally:
        backend.close()
    names = {k for t in trials for k in t["streams"] if not k.startswith("hub->")}
    streams = {n: [m for t in trials for m in t["streams"].get(n, [])[:t["total"]]] for n in names}
    return {"trials": trials, "streams": streams, "events": [e for t in trials for e in t["events"]],
            "total": runs * T}


def _seen(game: Game, side: int, rec: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What the adversary saw and its noiseless replays on D and D', stacked over the audited runs: (R·T, P, n)."""
    parts = [(game.view(t), *game.replay(side, t)) for t in rec["trials"]]
    return tuple(np.concatenate([p[i] for p in parts]) for i in range(3))


def _claim(game: Game, events: list) -> tuple[float, np.ndarray]:
    """The accountant's ε of one run (T consecutive events of the mechanism's party; the largest over
    the distinct blocks) and each event's σ."""
    sig = np.array([float(e.sigma) for e in events])
    nms = np.array([float(e.sigma) / float(e.sensitivity) if e.sensitivity > 0 else np.inf for e in events])
    T = game.rounds
    blocks = {tuple(np.round(nms[i:i + T], 12)) for i in range(0, len(nms) - T + 1, T)}
    eps = max(gaussian_epsilon([m for m in b if np.isfinite(m)], game.delta) for b in blocks)
    return float(eps), sig


def _lda(F0: np.ndarray, F1: np.ndarray) -> np.ndarray:
    """Linear discriminant weights from two samples (pooled covariance, a tiny ridge)."""
    d = F1.mean(0) - F0.mean(0)
    C = 0.5 * (np.cov(F0, rowvar=False).reshape(d.size, d.size) + np.cov(F1, rowvar=False).reshape(d.size, d.size))
    C = C + (1e-12 * max(np.trace(C), 1e-300) / d.size) * np.eye(d.size)
    if not (np.all(np.isfinite(C)) and np.all(np.isfinite(d))):
        return np.zeros_like(d)
    return np.linalg.lstsq(C, d, rcond=None)[0]


def _qda(F0: np.ndarray, F1: np.ndarray):
    """Gaussian log-likelihood ratio with a covariance per side (ridge-regularised): noise reused in a pattern that
    differs between the two runs (e.g. a counter's parity) leaves a noiseless direction on one side only."""
    params = []
    for F in (F0, F1):
        m = F.mean(0)
        C = np.cov(F, rowvar=False).reshape(m.size, m.size)
        C = C + (1e-9 * max(np.trace(C), 1e-300) / m.size) * np.eye(m.size)
        if not np.all(np.isfinite(C)):
            return lambda V: np.zeros(len(V))
        L = np.linalg.cholesky(C)
        params.append((m, L, 2.0 * np.sum(np.log(np.diag(L)))))

    def loglik(V, m, L, logdet):
        R = np.linalg.solve(L, (V - m).T)
        return -0.5 * np.sum(R * R, axis=0) - 0.5 * logdet

    return lambda V: loglik(V, *params[1]) - loglik(V, *params[0])


GAUSSIAN_SCORES = ("likelihood-ratio", "residual-discriminant")  # linear in Gaussian releases: the GDP fit is exact


def score_bound(s0: dict, s1: dict, delta: float, alpha: float) -> dict:
    """The largest of: the Gaussian-DP bound of every statistic that is linear in the releases, and the
    distribution-free Clopper–Pearson bound of every statistic (α split evenly over all of them: Bonferroni)."""
    k = sum(name in GAUSSIAN_SCORES for name in s0) + len(s0)
    best = {"epsilon_lower_bound": 0.0, "statistic": None, "clopper_pearson": 0.0}
    table = {}
    for name in s0:
        row = table[name] = {}
        if name in GAUSSIAN_SCORES:
            g = gdp_lower_bound(s0[name], s1[name], delta, alpha=alpha / k)
            row.update(gdp=g["epsilon_lower_bound"], mu=g["mu"], mu_lower=g["mu_lower"])
            if g["epsilon_lower_bound"] > best["epsilon_lower_bound"] or best["statistic"] is None:
                best.update(epsilon_lower_bound=float(g["epsilon_lower_bound"]), statistic=name,
                            mu_lower=g["mu_lower"])
        c = epsilon_lower_bound(s0[name], s1[name], delta, alpha=alpha / k)["epsilon_lower_bound"]
        row["clopper_pearson"] = c
        best["clopper_pearson"] = max(best["clopper_pearson"], float(c))
        if c > best["epsilon_lower_bound"]:
            best.update(epsilon_lower_bound=float(c), statistic=f"{name} (clopper-pearson)")
    best["statistics"] = table
    return best


def play(game: Game, *, runs: int, seed: int = 0, confidence: float = 0.95, progress=None) -> AuditResult:
    """Play ``game`` ``runs × game.runs_factor`` times on each side and bound ε (module docstring)."""
    if game.runner is not None:
        return game.runner(game, runs=runs, seed=seed, confidence=confidence, progress=progress)
    runs = int(runs) * int(game.runs_factor)
    if game.max_runs is not None:
        runs = min(runs, int(game.max_runs))
    t0 = time.perf_counter()
    ss = np.random.SeedSequence([seed, zlib.crc32(game.name.encode())])
    seeds = ss.generate_state(2)
    sides, claim = [], 0.0
    for side in (0, 1):
        noise_seed = None if game.backend != "inprocess" else int(seeds[side])  # out of process: party-local entropy
        rec = (game.player or _play)(game, side, runs, noise_seed)
        eps, s = _claim(game, rec["events"])
        claim = max(claim, eps)
        X, mu0, mu1 = _seen(game, side, rec)
        sides.append((X, mu0, mu1, s))
    T = game.rounds
    lr, feats = [], []
    # the directions the canary moves (over both sides' runs and every party): the residuals' projection basis
    Dm = np.concatenate([(m1 - m0).reshape(-1, m0.shape[-1]) for _, m0, m1, _ in sides])
    _, sv, Vt = np.linalg.svd(Dm, full_matrices=False)
    Q = Vt[: max(1, int(np.sum(sv > 1e-9 * max(sv[0], 1e-300))))].T  # (n, k)
    for X, mu0, mu1, s in sides:
        R = X.shape[0] // T
        mid = 0.5 * (mu0 + mu1)
        # the mechanism party's stated σ of each round (σ = 0: a release without noise — unit weight, so a shift
        # shows as a score without spread rather than as inf)
        sigma2 = np.where(s > 0, s, 1.0)[:, None] ** 2
        term = np.sum((mu1 - mu0) * (X - mid), axis=-1) / sigma2  # (R·T, P)
        lr.append(term[:R * T].reshape(R, -1).sum(axis=1))
        feats.append(((X - mid) @ Q)[:R * T].reshape(R, -1))
    alpha = 1.0 - confidence
    f0, f1 = len(feats[0]) // 4, len(feats[1]) // 4
    wts = _lda(feats[0][:f0], feats[1][:f1])
    quad = _qda(feats[0][:f0], feats[1][:f1])
    s0 = {"likelihood-ratio": lr[0][f0:], "residual-discriminant": feats[0][f0:] @ wts,
          "residual-quadratic": quad(feats[0][f0:])}
    s1 = {"likelihood-ratio": lr[1][f1:], "residual-discriminant": feats[1][f1:] @ wts,
          "residual-quadratic": quad(feats[1][f1:])}
    res = score_bound(s0, s1, game.delta, alpha)
    lb = res["epsilon_lower_bound"]
    if progress:
        progress(f"{game.name}: lower bound {lb:.2f} ({res['statistic']}), claimed {claim:.2f}")
    return AuditResult(
        name=game.name, epsilon_claimed=float(claim), epsilon_lower_bound=float(lb), delta=float(game.delta),
        broken=game.broken, samples=int(runs), confidence=float(confidence), caught=bool(lb > claim),
        description=game.description,
        details={"end_to_end": True, "worst_case": True, "algorithm": game.algorithm, "relation": game.relation,
                 "adversary_view": game.adversary, "planted_bug": game.bug or None, "runs_per_dataset": runs,
                 "rounds_per_run": T, "backend": game.backend,
                 "noise": "party-local OS entropy" if game.backend != "inprocess" else "seeded simulation",
                 "ratio": float(lb / claim) if claim > 0 else None, "claimed_mu": gdp_mu(claim, game.delta),
                 "statistic": res["statistic"], "statistics": res["statistics"], "note": game.note,
                 "mu_lower": res.get("mu_lower"), "clopper_pearson_lower_bound": res["clopper_pearson"],
                 "seconds": round(time.perf_counter() - t0, 1)},
    )


def one_release_result(game: Game, *, claim: float, lb: float, stat: str, table: dict, runs: int, confidence: float,
                       t0: float, backend: str, progress=None, **details) -> AuditResult:
    """The :class:`AuditResult` of a game whose run is one pure-ε label release (randomized response and its
    relatives: :mod:`.audit_games_rr`, :mod:`.audit_games_label_rr`): the bound ``lb`` of the statistic ``stat``
    (Clopper–Pearson, δ = 0) out of ``table``; ``details`` adds game-specific entries. Reports ``progress``."""
    if progress:
        progress(f"{game.name}: lower bound {lb:.2f} ({stat}), claimed {claim:.2f}")
    return AuditResult(
        name=game.name, epsilon_claimed=claim, epsilon_lower_bound=float(lb), delta=0.0, broken=game.broken,
        samples=runs, confidence=float(confidence), caught=bool(lb > claim), description=game.description,
        details={"end_to_end": True, "worst_case": True, "algorithm": game.algorithm, "relation": game.relation,
                 "adversary_view": game.adversary, "planted_bug": game.bug or None, "runs_per_dataset": runs,
                 "rounds_per_run": 1, "backend": backend, "noise": "seeded simulation (one seed per run)",
                 "ratio": float(lb / claim) if claim > 0 else None, "statistic": f"{stat} (clopper-pearson)",
                 "statistics": table, **details, "note": game.note, "clopper_pearson_lower_bound": float(lb),
                 "seconds": round(time.perf_counter() - t0, 1)})
