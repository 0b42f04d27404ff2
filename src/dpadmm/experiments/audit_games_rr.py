"""Worst-case audit game of the vertical label side's default mechanism: randomized response (pure label-ε).

Mechanism (:func:`dpadmm.algorithms.vertical.label.randomized_response`): the label party releases its
labels once, each flipped independently with probability ``q = 1/(1 + e^ε)``; every later message of the
fit is post-processing of the released labels ỹ. The strongest adversary therefore sees ỹ itself (any
message computed from it can only tell less), knows every other label, and the neighbouring pair flips
the canary's label (+1 on D, −1 on D').

Code path: each run calls ``algorithms.vertical.driver.rr_labels`` — the function ``fit`` calls for its one
release (the label party's generator ``party_rng(seed, M + 1, 0)``, one seed per run: a seeded simulation;
``tests/unit/test_audit_rr.py`` checks that a fit's coordinator runs on exactly what it returns) — and the
claim is the ε of the ``PureDPRelease`` events it emits.

Statistics (each a fixed threshold test, both orientations, Clopper–Pearson at ``α/(2k)`` per rate over the
k = 4 tests: Bonferroni; δ = 0):

- ``likelihood-ratio``: the canary's released label. With independent flips this is the whole likelihood
  ratio (the other rows' outputs do not depend on the canary), so the bound ``ln((1 − FPR⁺)/FNR⁺)`` tends to
  ``ln((1 − q)/q) = ε``: ratio 0.92 at 6,000 runs per side, 0.96 at 40,000.
- ``decoded``: the canary's released label corrected by the flip the adversary sees on one other row j*
  (it knows y_j, so it sees whether row j flipped). j* is the row whose flips agree most often with the
  canary's on the first quarter of the runs (where the auditor knows the canary's label); the rest
  evaluate. Honest flips are independent, so this is noisier than the first (error ``2q(1 − q)``); a flip
  draw shared between rows makes it exact.

Plants (patched for the run only): the flip probability computed at 2ε; one uniform draw shared by every
row (``rng.random() < q`` instead of ``rng.random(n) < q``).
"""

from __future__ import annotations

import contextlib
import math
import time
import zlib
from typing import ContextManager
from unittest import mock

import numpy as np

from ..algorithms.vertical import label as vertical_label
from ..algorithms.vertical import driver as vertical_fit
from ..algorithms.vertical.driver import rr_labels as _rr_labels
from ..privacy.audit import AuditResult, clopper_pearson_upper
from .audit_games import CANARY, EPSILON, Game, generator_plant, one_release_result

RR_N, RR_PARTIES = 8, 2


def _labels() -> tuple[np.ndarray, np.ndarray]:
    y = np.where(np.arange(RR_N) % 2 == 0, 1.0, -1.0)  # the canary (row 0) is +1 on D
    yb = y.copy()
    yb[CANARY] = -1.0
    return y, yb


def _threshold_bound(s0: np.ndarray, s1: np.ndarray, alpha_rate: float) -> tuple[float, dict]:
    """The better orientation of "D' when score > 0": ``ln((1 − FPR⁺)/FNR⁺)`` with Clopper–Pearson bounds at
    ``alpha_rate`` each (δ = 0)."""
    best, info = 0.0, {}
    for sign in (1, -1):
        fp, fn = int(np.sum(sign * s0 > 0)), int(np.sum(sign * s1 <= 0))
        fpr, fnr = clopper_pearson_upper(fp, len(s0), alpha_rate), clopper_pearson_upper(fn, len(s1), alpha_rate)
        eps = math.log((1.0 - fpr) / fnr) if fpr < 1.0 and fnr > 0 else 0.0
        if eps > best or not info:
            best = max(eps, 0.0)
            info = {"epsilon": best, "orientation": sign, "false_positives": fp, "false_negatives": fn,
                    "fpr_upper": fpr, "fnr_upper": fnr, "n": [len(s0), len(s1)]}
    return best, info


def rr_scores(X0: np.ndarray, X1: np.ndarray, y: np.ndarray, yb: np.ndarray) -> tuple[dict, dict, int]:
    """The two statistics (module docstring) on released labels ``X0`` (runs on D) and ``X1`` (on D'), scored so
    that D' scores higher; returns (scores on D, scores on D', the decoding row j*)."""
    f0, f1 = X0 != y, X1 != yb  # every row's flip indicator (the canary's: known to the auditor only)
    q0, q1 = len(X0) // 4, len(X1) // 4
    train = np.concatenate([f0[:q0], f1[:q1]])
    others = [j for j in range(X0.shape[1]) if j != CANARY]
    agree = np.array([np.mean(train[:, CANARY] == train[:, j]) for j in others])
    k = int(np.argmax(np.abs(agree - 0.5)))
    j, same = others[k], agree[k] >= 0.5

    def decoded(X, f):
        flip = f[:, j] if same else ~f[:, j]
        return -X[:, CANARY] * np.where(flip, -1.0, 1.0)

    s0 = {"likelihood-ratio": -X0[:, CANARY], "decoded": decoded(X0, f0)[q0:]}
    s1 = {"likelihood-ratio": -X1[:, CANARY], "decoded": decoded(X1, f1)[q1:]}
    return s0, s1, j


def play_rr(game: Game, *, runs: int, seed: int = 0, confidence: float = 0.95, progress=None) -> AuditResult:
    """Play the randomized-response game ``runs × runs_factor`` times on each side (module docstring)."""
    runs = int(runs) * int(game.runs_factor)
    if game.max_runs is not None:
        runs = min(runs, int(game.max_runs))
    t0 = time.perf_counter()
    seeds = np.random.SeedSequence([seed, zlib.crc32(game.name.encode())]).generate_state(2 * runs)
    y, yb = _labels()
    views, claim = [], 0.0
    ctx: ContextManager = game.extra["plant"]() if game.extra.get("plant") else contextlib.nullcontext()
    with ctx, _generator_planted():
        for side, labels in enumerate((y, yb)):
            rows = []
            for r in range(runs):
                released, events = _rr_labels(labels, EPSILON, int(seeds[side * runs + r]), RR_PARTIES, None, None)
                rows.append(released)
                claim = max(claim, float(sum(e.epsilon for e in events)))
            views.append(np.asarray(rows, dtype=np.float64))
    s0, s1, j = rr_scores(views[0], views[1], y, yb)
    alpha = 1.0 - confidence
    k = 2 * len(s0)  # tests: statistics × orientations
    table = {}
    for name in s0:
        _, table[name] = _threshold_bound(s0[name], s1[name], alpha / (2 * k))
    stat = max(table, key=lambda n: table[n]["epsilon"])
    return one_release_result(game, claim=claim, lb=table[stat]["epsilon"], stat=stat, table=table, runs=runs,
                              confidence=confidence, t0=t0, backend="inprocess (the estimator's release function)",
                              progress=progress, decoding_row=j)


def _generator_planted() -> ContextManager:
    """``dpadmm audit --plant``: the label party's generator of each release planted (one per fit)."""
    if generator_plant() is None:
        return contextlib.nullcontext()
    real = vertical_fit.party_rng  # patched where _rr_labels looks it up
    return mock.patch.object(vertical_fit, "party_rng",
                             lambda entropy, index, round_: generator_plant()(real(entropy, index, round_), "coordinator"))


def rr_game(*, plant=None, bug: str = "", tag: str = "") -> Game:
    return Game(
        name=f"worst-case vertical-label-rr{tag}", algorithm="vertical ADMM sharing [Hu], label side (randomized "
                                                              "response, the default)",
        relation="label", adversary="anyone the released labels reach (a passive party, the coordinator's "
                                    "messages are post-processing of them): sees every released label, knows "
                                    "every other true label",
        description=f"one flipped training label of {RR_N}, the label party's randomized-response release, "
                    f"epsilon = {EPSILON:g} (pure, delta = 0)",
        rounds=1, setup=None, view=None, replay=None,  # type: ignore[arg-type]  (played by ``runner``)
        mechanism_party="coordinator", delta=0.0,
        broken=plant is not None, bug=bug, runs_factor=20, runner=play_rr, extra={"plant": plant},
        note="ratio limit 1 (ln((1 - q)/q) = epsilon): 0.92 at 6,000 runs per side, 0.96 at 40,000")


def _flip_at_double_epsilon() -> ContextManager:
    # patched where randomized_response looks it up
    return mock.patch.object(vertical_label, "flip_probability", lambda epsilon: float(1.0 / (1.0 + np.exp(2.0 * epsilon))))


class _SharedDraw:
    """A generator whose ``random(size)`` is one uniform repeated (plant: one flip draw for every row)."""

    def __init__(self, rng):
        self.rng = rng

    def random(self, size=None, dtype=np.float64, out=None):
        return np.full(() if size is None else size, self.rng.random(), dtype=dtype)

    def __getattr__(self, name):
        return getattr(self.rng, name)


def _shared_draw() -> ContextManager:
    real = vertical_fit.party_rng  # patched where _rr_labels looks it up
    return mock.patch.object(vertical_fit, "party_rng",
                             lambda entropy, index, round_: _SharedDraw(real(entropy, index, round_)))


def rr_plants() -> list[Game]:
    return [rr_game(plant=_flip_at_double_epsilon, tag=" (planted: flip probability at 2 epsilon)",
                    bug="vertical_label.flip_probability computed at 2 epsilon: q = 1/(1 + e^(2 epsilon)); the "
                        "event keeps epsilon"),
            rr_game(plant=_shared_draw, tag=" (planted: one flip draw shared by every row)",
                    bug="the label party draws one uniform and compares it with q for every row (all labels flip "
                        "together)")]
