"""Worst-case audit games of the label releases beyond two classes (:mod:`dpadmm.privacy.label_mechanisms`):
k-ary randomized response (several classes), randomized response on bins (real-valued labels) and on bins over
clipped counts (:mod:`dpadmm.privacy.label_counts`), pure label-ε.

Each run releases a small label vector once; every later message of a fit on the released labels is
post-processing, so the strongest adversary sees the release itself — and, for the bins, the range, the noisy prior
and Φ (outputs and assignment) — and knows every other label. The neighbouring pair changes the canary's label
(row 0): class 0 → 1 (k-ary, K = 4), value 0 → 1 (bins, public range [0, 1], 8 bins), count 0 → 3 (counts,
declared bound U = 3: unit bins on 0 … 3).

Statistic: the event ``S`` = "the canary's released value is the one D' makes likely" — class 1 (k-ary), or
``Φ(1)`` when Φ separates the canary's two values (bins) — and, the other orientation, the value D makes likely.
Pure ε-DP gives ``P(S | D') ≤ e^ε P(S | D)`` for every S, so ``ln(TPR⁻/FPR⁺)`` with Clopper–Pearson bounds at
``α/(2k)`` per rate (k = 2 orientations; Bonferroni) is a lower bound on ε. For the k-ary mechanism ``TPR/FPR = e^ε``
exactly; for the bins the randomized response's ``e^{ε_rr}`` (the prior's ε_p moves Φ only slightly), so both
honest bounds tend to ≈ their claim: 0.90 of it at 2,000 runs per side (k-ary), 0.80 (bins), 0.76 (counts).

Plants (for the run only): every uniform the release draws divided by 2 (the change probability halved:
:class:`~dpadmm.experiments.audit_rngs.ScaledRNG` — the ×½-noise plant of every mechanism); the change
probability computed at 2ε (the events keep ε).
"""

from __future__ import annotations

import contextlib
import math
import time
import zlib
from typing import Callable, ContextManager
from unittest import mock

import numpy as np

from ..privacy import label_mechanisms as lm
from ..privacy.label_counts import rr_on_counts
from ..privacy.audit import AuditResult, clopper_pearson_upper
from .audit_games import CANARY, EPSILON, Game, generator_plant, one_release_result
from .audit_rngs import ScaledRNG

N_ROWS, N_CLASSES, N_BINS, COUNT_UPPER = 8, 4, 8, 3


def _release(kind: str, side: int, rng) -> tuple[np.ndarray, list, np.ndarray]:
    """One release on side 0 (D) or 1 (D'): (released labels, events, the two values S and its mirror test for)."""
    if kind == "k-rr":
        y = np.arange(N_ROWS) % N_CLASSES
        y[CANARY] = side  # class 0 on D, 1 on D'
        out, events = lm.k_randomized_response(y, N_CLASSES, EPSILON, rng=rng)
        return out.astype(np.float64), events, np.array([1.0, 0.0])
    if kind == "rr-counts":
        y = (np.arange(N_ROWS) % (COUNT_UPPER + 1)).astype(np.float64)
        y[CANARY] = float(side * COUNT_UPPER)  # count 0 on D, U on D'
        rel = rr_on_counts(y, EPSILON, rng=rng, upper=COUNT_UPPER, n_bins=N_BINS)
    else:
        y = np.linspace(0.0, 1.0, N_ROWS)
        y[CANARY] = float(side)  # value 0 on D, 1 on D'
        rel = lm.rr_on_bins(y, EPSILON, rng=rng, label_range=(0.0, 1.0), n_bins=N_BINS)
    hi, lo = rel.outputs[rel.assign[-1]], rel.outputs[rel.assign[0]]
    targets = np.array([hi, lo]) if hi != lo else np.array([np.nan, np.nan])  # Φ merges them: no test fires
    return rel.labels, rel.events, targets


def _bound(hits0: np.ndarray, hits1: np.ndarray, alpha_rate: float) -> tuple[float, dict]:
    """``ln(TPR⁻/FPR⁺)`` of "D' when S": Clopper–Pearson bounds (TPR's lower one by the upper one of the misses)."""
    fp, tp = int(hits0.sum()), int(hits1.sum())
    fpr = clopper_pearson_upper(fp, hits0.size, alpha_rate)
    tpr = 1.0 - clopper_pearson_upper(hits1.size - tp, hits1.size, alpha_rate)
    eps = math.log(tpr / fpr) if tpr > 0 and fpr > 0 else 0.0
    return max(eps, 0.0), {"epsilon": max(eps, 0.0), "hits": [fp, tp], "fpr_upper": fpr, "tpr_lower": tpr,
                           "n": [hits0.size, hits1.size]}


def play_label_rr(game: Game, *, runs: int, seed: int = 0, confidence: float = 0.95, progress=None) -> AuditResult:
    """Play ``runs × runs_factor`` releases on each side (module docstring)."""
    runs = int(runs) * int(game.runs_factor)
    if game.max_runs is not None:
        runs = min(runs, int(game.max_runs))
    t0 = time.perf_counter()
    kind = game.extra["kind"]
    seeds = np.random.SeedSequence([seed, zlib.crc32(game.name.encode())]).generate_state(2 * runs)
    wrap: Callable = game.extra.get("wrap") or (lambda rng: rng)
    every = generator_plant()  # ``dpadmm audit --plant``: every generator planted
    ctx: ContextManager = game.extra["plant"]() if game.extra.get("plant") else contextlib.nullcontext()
    hits, claim = [], 0.0
    with ctx:
        for side in (0, 1):
            canary, targets = np.empty(runs), np.empty((runs, 2))
            for r in range(runs):
                rng = wrap(np.random.default_rng(int(seeds[side * runs + r])))
                if every is not None:
                    rng = every(rng, "label party")
                released, events, targets[r] = _release(kind, side, rng)
                canary[r] = released[CANARY]
                claim = max(claim, float(sum(e.epsilon for e in events)))
            hits.append(canary[:, None] == targets)  # (runs, 2): S, its mirror
    alpha = 1.0 - confidence
    table = {"toward D'": _bound(hits[0][:, 0], hits[1][:, 0], alpha / 4)[1],
             "toward D": _bound(hits[1][:, 1], hits[0][:, 1], alpha / 4)[1]}
    stat = max(table, key=lambda n: table[n]["epsilon"])
    return one_release_result(game, claim=claim, lb=table[stat]["epsilon"], stat=stat, table=table, runs=runs,
                              confidence=confidence, t0=t0, backend="inprocess (the label party's release function)",
                              progress=progress)


_ABOUT = {
    "k-rr": ("k-ary randomized response of several-class labels (privacy.label_mechanisms.k_randomized_response)",
             f"one changed training label of {N_ROWS} (class 0 -> 1 of {N_CLASSES}), the label party's k-ary "
             f"randomized-response release, epsilon = {EPSILON:g} (pure, delta = 0)",
             "ratio limit 1 (P(S|D')/P(S|D) = e^epsilon): 0.90 at 2,000 runs per side"),
    "rr-bins": ("randomized response on bins of real-valued labels (privacy.label_mechanisms.rr_on_bins; Ghazi et "
                "al. 2023)",
                f"one changed training label of {N_ROWS} (0 -> 1, public range [0, 1], {N_BINS} bins), the label "
                f"party's release: Laplace prior (10% of epsilon), optimal bins, randomized response, epsilon = "
                f"{EPSILON:g} in all (pure, delta = 0)",
                "ratio limit about 0.9 (the randomized response's share of epsilon): 0.80 at 2,000 runs per side"),
    "rr-counts": ("randomized response on bins over clipped counts (privacy.label_counts.rr_on_counts; Ghazi et al. "
                  "2023, Poisson loss)",
                  f"one changed training count of {N_ROWS} (0 -> {COUNT_UPPER}, declared bound {COUNT_UPPER}: unit "
                  f"bins), the label party's release: Laplace prior (10% of epsilon), Poisson-optimal bins, "
                  f"randomized response, epsilon = {EPSILON:g} in all (pure, delta = 0)",
                  "ratio limit about 0.9 (the randomized response's share of epsilon): 0.76 at 2,000 runs per side"),
}


def label_rr_game(kind: str, *, plant=None, wrap=None, bug: str = "", tag: str = "") -> Game:
    algorithm, description, note = _ABOUT[kind]
    return Game(
        name=f"worst-case label-{kind}{tag}", algorithm=algorithm, relation="label",
        adversary="anyone the released labels reach (every later message is post-processing of them): sees the "
                  "release (and the range, prior and bins), knows every other true label",
        description=description, rounds=1, setup=None, view=None, replay=None,  # type: ignore[arg-type]
        mechanism_party="label party", delta=0.0, broken=plant is not None or wrap is not None, bug=bug,
        runs_factor=20, runner=play_label_rr, extra={"kind": kind, "plant": plant, "wrap": wrap}, note=note)


def _change_at_double_epsilon() -> ContextManager:
    real = lm.change_probability
    return mock.patch.object(lm, "change_probability", lambda epsilon, k: real(2.0 * epsilon, k))


def label_rr_games() -> list[Game]:
    """The honest rows of the three mechanisms."""
    return [label_rr_game("k-rr"), label_rr_game("rr-bins"), label_rr_game("rr-counts")]


def label_rr_plants() -> list[Game]:
    """Both plants of the three mechanisms."""
    out = []
    for kind in ("k-rr", "rr-bins", "rr-counts"):
        out.append(label_rr_game(kind, wrap=lambda rng: ScaledRNG(rng, 0.5), tag=" (planted: noise x1/2)",
                                 bug="every uniform the release draws divided by 2: the change probability halved"))
        out.append(label_rr_game(kind, plant=_change_at_double_epsilon, tag=" (planted: change probability at 2 "
                                                                             "epsilon)",
                                 bug="label_mechanisms.change_probability computed at 2 epsilon; the events keep "
                                     "epsilon"))
    return out
