"""The label party's choice of what to hand over: a stacked combination of its own model and the experts, or its own model.

A product of experts can rank better than the label party's own model yet predict worse (it adds the parties'
logits as if their features were independent given the label; output perturbation adds noise to each). The label
party decides on rows it already holds — never on a test set — at every size (issue 38: no size below which the
choice is skipped):

1. it holds out a fraction of its training rows (a uniformly random subset, drawn from its own generator: the
   choice of rows depends on nothing in the data) and sends labels for the other rows only; every party fits its
   DP model (and bounds its columns) on those rows;
2. on the held-out rows it has its own model's logit (fitted without them) and each party's logit (those rows are
   not in any party's training set: the logits are post-processing of the DP coefficients, like scoring a test
   set), and the labels;
3. it fits a stacked logistic regression ``logit = c + a·own + Σ_m b_m·(expert_m − prior)`` — one weight per
   expert, so a party whose columns help gets a weight of its own and a noisy one gets ≈ 0 — with a ridge that pulls
   ``(a, b)`` towards the own model ``(1, 0)`` (a unit Gaussian prior on the weights: with few rows the stack stays
   near the own model instead of fitting noise). It compares the stacked fit with its own model by K-fold
   cross-validation on the held-out rows, repeated over ``REPEATS`` fold draws, and keeps the stacked model only if
   its cross-validated log loss is lower than its own model's by more than two standard errors of the paired
   difference; otherwise it keeps its own model (fitted on all its rows: exactly "the label party alone"). Too few
   held-out rows for the folds (fewer than ``2·FOLDS``): its own model.

Privacy: no cost, and the accounting is unchanged — each party still releases its DP model once (its ε is that of
its fit on the rows it was sent). Step 3 is post-processing at the label party of what the parties released (their
DP coefficients, through logits on records outside their training sets) combined with the label party's own data,
which never leaves it; the held-out labels are never sent, and nothing computed in step 3 is sent anywhere.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

#: share of the label party's training rows held out for the choice
HELDOUT_FRACTION = 0.2
FOLDS = 5
#: fold draws the cross-validated losses are averaged over (less variance in the choice; post-processing only)
REPEATS = 4


class Choice(NamedTuple):
    kind: str  # "stacked" or "own model"
    weights: tuple  # (c, a, b_1, …, b_M): logit = c + a·own + Σ_m b_m·(expert_m − prior); (0, 1, 0, …) for the own model
    heldout_rows: int
    loss_own: float
    loss_stacked: float
    tolerance: float

    def facts(self) -> dict:
        return {"choice": self.kind, "weights": [float(w) for w in self.weights], "heldout_rows": self.heldout_rows,
                "heldout_log_loss_own": self.loss_own, "heldout_log_loss_stacked": self.loss_stacked,
                "tolerance": self.tolerance}


def own_model_choice(n_experts: int, heldout_rows: int = 0) -> Choice:
    """The own model kept without a comparison (too few held-out rows for the folds)."""
    return Choice("own model", (0.0, 1.0) + (0.0,) * int(n_experts), int(heldout_rows), math.nan, math.nan, math.nan)


def split(n: int, rng: np.random.Generator, fraction: float = HELDOUT_FRACTION):
    """``(fit_rows, heldout_rows)`` index arrays, or ``(all rows, None)`` when fewer than ``2·FOLDS`` rows would be
    held out (the label party then keeps its own model)."""
    k = int(math.floor(fraction * n))
    if k < 2 * FOLDS:
        return np.arange(n), None
    perm = rng.permutation(n)
    return np.sort(perm[k:]), np.sort(perm[:k])


def _per_row_loss(s, y) -> np.ndarray:
    return np.logaddexp(0.0, -y * s)


def fit_stack(F, y, ridge: float = 1e-6, centre=None) -> np.ndarray:
    """Logistic regression of ``y`` (±1) on the columns of ``F`` plus an intercept (Newton), with the penalty
    ``ridge/2·‖w − centre‖²``: on every weight (``centre`` None: towards 0, the intercept too) or, with a ``centre``,
    on the columns' weights only (the intercept free)."""
    A = np.column_stack([np.ones(F.shape[0]), F])
    c0 = np.zeros(A.shape[1])
    if centre is not None:
        c0[1:] = np.asarray(centre, dtype=np.float64)
    P = ridge * np.eye(A.shape[1])
    if centre is not None:
        P[0, 0] = 1e-10  # the intercept is (all but) free
    def value(v):
        return float(np.mean(_per_row_loss(A @ v, y))) + 0.5 * float((v - c0) @ P @ (v - c0))

    w = c0.copy()
    f = value(w)
    for _ in range(100):
        s = A @ w
        p = 1.0 / (1.0 + np.exp(-np.clip(y * s, -50, 50)))
        g = -(A.T @ (y * (1.0 - p))) / len(y) + P @ (w - c0)
        h = (A * (p * (1.0 - p))[:, None]).T @ A / len(y) + P
        step = np.linalg.solve(h, g)
        t = 1.0  # backtracking: a full Newton step from far away (e.g. logits of ±5 on few rows) can diverge
        while t > 1e-8 and value(w - t * step) > f + 1e-12:
            t *= 0.5
        w = w - t * step
        f = value(w)
        if float(np.abs(t * step).max()) < 1e-10:
            break
    return w


def choose(own_logit, experts, y, rng: np.random.Generator, shrink: bool = False) -> Choice:
    """Step 3 of the module docstring on the held-out rows: ``own_logit`` (the label party's model fitted without
    them), ``experts`` one column per expert (``expert_m − prior``; a vector: one column, e.g. their sum), ``y`` in
    ±1. ``shrink``: the stack's ridge pulls its weights towards the own model (strength ``1/rows``); otherwise a
    tiny ridge towards 0 (the encrypted protocol's Platt scaling)."""
    own_logit, y = np.asarray(own_logit, dtype=np.float64), np.asarray(y, dtype=np.float64)
    E = np.asarray(experts, dtype=np.float64)
    E = E[:, None] if E.ndim == 1 else E
    n, m = len(y), E.shape[1]
    F = np.column_stack([own_logit, E])
    ridge, centre = (1.0 / n, np.r_[1.0, np.zeros(m)]) if shrink else (1e-6, None)
    repeats = REPEATS if shrink else 1
    stacked = np.zeros(n)
    for _ in range(repeats):
        folds = rng.permutation(n) % FOLDS
        for k in range(FOLDS):
            w = fit_stack(F[folds != k], y[folds != k], ridge, centre)
            stacked[folds == k] += _per_row_loss(w[0] + F[folds == k] @ w[1:], y[folds == k]) / repeats
    l_own, l_st = _per_row_loss(own_logit, y), stacked
    d = l_st - l_own
    tol = max(2.0 * float(d.std(ddof=1)) / math.sqrt(n), 1e-6 * float(l_own.mean()))
    if float(d.mean()) < -tol:
        w = fit_stack(F, y, ridge, centre)
        return Choice("stacked", tuple(float(v) for v in w), n, float(l_own.mean()), float(l_st.mean()), tol)
    return Choice("own model", (0.0, 1.0) + (0.0,) * m, n, float(l_own.mean()), float(l_st.mean()), tol)
