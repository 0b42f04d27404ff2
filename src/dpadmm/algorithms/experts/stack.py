"""The label party's choice for the regression target: a least-squares stack of its own model and the experts, or
its own model — :mod:`.calibrate`'s rule with the squared error in place of the log loss.

On held-out rows of its own (a uniformly random subset drawn from its own generator, :func:`.calibrate.split`;
labels for them are never sent, every party fits without them) the label party has its own model's prediction
(fitted without them), each party's prediction there (records outside every party's training set: post-processing of
their DP releases) and its exact labels. It fits ``ŷ = c + a·own + Σ_m b_m·expert_m`` by least squares with a ridge
pulling ``(a, b)`` towards the own model ``(1, 0)`` (strength ``1/rows`` on the labels standardised by their spread
on those rows: with few rows the stack stays near the own model), compares its squared error with the own model's by
K-fold cross-validation repeated over ``REPEATS`` fold draws, and keeps the stack only if it is lower by more than
two standard errors of the paired difference; otherwise its own model (fitted on all its rows: exactly "the label
party alone"). Fewer than ``2·FOLDS`` held-out rows: its own model, at every size the same rule.

Privacy: none spent. Everything here is post-processing at the label party of the parties' releases and its own
data, which never leaves it; nothing computed here is sent.
"""

from __future__ import annotations

import math

import numpy as np

from .calibrate import FOLDS, REPEATS, Choice


def fit_stack(F, y, ridge: float, centre) -> np.ndarray:
    """``(c, w)`` minimising ``mean((y − c − F w)²)/s² + ridge·‖w − centre‖²`` (``s`` the spread of ``y``; the
    intercept free), in closed form."""
    s2 = float(np.var(y))
    s2 = s2 if s2 > 1e-12 * max(float(np.mean(y * y)), 1e-300) else 1.0  # constant labels: no spread to standardise by
    fm, ym = F.mean(axis=0), float(y.mean())
    Fc, yc = F - fm, y - ym
    n, k = F.shape
    H = Fc.T @ Fc / (n * s2) + ridge * np.eye(k)
    w = np.linalg.solve(H, Fc.T @ yc / (n * s2) + ridge * np.asarray(centre, dtype=np.float64))
    return np.r_[ym - fm @ w, w]


def choose(own, experts, y, rng: np.random.Generator) -> Choice:
    """The choice of the module docstring on the held-out rows: ``own`` the label party's prediction, ``experts``
    one column per party (its prediction), ``y`` the exact labels. ``Choice.loss_*`` are mean squared errors."""
    own, y = np.asarray(own, dtype=np.float64), np.asarray(y, dtype=np.float64)
    E = np.asarray(experts, dtype=np.float64)
    E = E[:, None] if E.ndim == 1 else E
    n, m = len(y), E.shape[1]
    if n < 2 * FOLDS:
        return Choice("own model", (0.0, 1.0) + (0.0,) * m, n, math.nan, math.nan, math.nan)
    F = np.column_stack([own, E])
    centre, ridge = np.r_[1.0, np.zeros(m)], 1.0 / n
    stacked = np.zeros(n)
    for _ in range(REPEATS):
        folds = rng.permutation(n) % FOLDS
        for k in range(FOLDS):
            w = fit_stack(F[folds != k], y[folds != k], ridge, centre)
            stacked[folds == k] += (y[folds == k] - w[0] - F[folds == k] @ w[1:]) ** 2 / REPEATS
    l_own = (y - own) ** 2
    d = stacked - l_own
    tol = max(2.0 * float(d.std(ddof=1)) / math.sqrt(n), 1e-6 * float(l_own.mean()))
    if float(d.mean()) < -tol:
        w = fit_stack(F, y, ridge, centre)
        return Choice("stacked", tuple(float(v) for v in w), n, float(l_own.mean()), float(stacked.mean()), tol)
    return Choice("own model", (0.0, 1.0) + (0.0,) * m, n, float(l_own.mean()), float(stacked.mean()), tol)


def apply(choice: Choice, own, experts) -> np.ndarray:
    """The label party's final prediction from its own prediction and the parties' (its ``choice``)."""
    own = np.asarray(own, dtype=np.float64)
    if choice.kind == "own model":
        return own
    c, a, *b = choice.weights
    return c + a * own + sum(w * np.asarray(e, dtype=np.float64) for w, e in zip(b, experts))


def facts(choice: Choice) -> dict:
    """The choice's public record (metrics.json ``final.calibration``) with the regression's names."""
    return {"choice": choice.kind, "weights": [float(w) for w in choice.weights], "heldout_rows": choice.heldout_rows,
            "heldout_mse_own": choice.loss_own, "heldout_mse_stacked": choice.loss_stacked,
            "tolerance": choice.tolerance}
