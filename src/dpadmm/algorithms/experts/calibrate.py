"""The label party's choice of what to hand over: the experts' combination recalibrated, or its own model.

A product of experts can rank better than the label party's own model yet predict worse (it adds the parties'
logits as if their features were independent given the label; output perturbation adds noise to each). The label
party decides on rows it already holds — never on a test set:

1. it holds out a fraction of its training rows (a uniformly random subset, drawn from its own generator: the
   choice of rows depends on nothing in the data) and sends labels for the other rows only; every party fits its
   DP model (and bounds its columns) on those rows;
2. on the held-out rows it has its own model's logit (fitted without them) and each party's logit (those rows are
   not in any party's training set: the logits are post-processing of the DP coefficients, like scoring a test
   set), and the labels;
3. it compares, by 5-fold cross-validation on the held-out rows, its own model with a stacked logistic fit
   ``logit = c + a·own + b·Σ_m (expert_m − prior)`` (Platt scaling of the combination, with the weight of its own
   model free). It keeps the stacked model only if its cross-validated log loss is lower than its own model's by
   more than two standard errors of the paired difference; otherwise it keeps its own model (fitted on all its
   rows: exactly "the label party alone").

Privacy: no cost. Step 3 is post-processing of what the parties released (their DP coefficients, through logits on
records outside their training sets) combined with the label party's own data, which never leaves it; the held-out
labels are never sent. The feature side's ε is that of the parties' fits on the rows they were sent.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

#: share of the label party's training rows held out for the choice (when at least MIN_HELDOUT rows)
HELDOUT_FRACTION = 0.2
#: fewer held-out rows than this: no choice is made (the product of experts as fitted)
MIN_HELDOUT = 200
FOLDS = 5


class Choice(NamedTuple):
    kind: str  # "stacked" or "own model"
    weights: tuple  # (c, a, b): logit = c + a·own + b·Σ(expert − prior); (0, 1, 0) for the own model
    heldout_rows: int
    loss_own: float
    loss_stacked: float
    tolerance: float

    def facts(self) -> dict:
        return {"choice": self.kind, "weights": [float(w) for w in self.weights], "heldout_rows": self.heldout_rows,
                "heldout_log_loss_own": self.loss_own, "heldout_log_loss_stacked": self.loss_stacked,
                "tolerance": self.tolerance}


def split(n: int, rng: np.random.Generator, fraction: float = HELDOUT_FRACTION):
    """``(fit_rows, heldout_rows)`` index arrays, or ``(all rows, None)`` when too few rows would be held out."""
    k = int(math.floor(fraction * n))
    if k < MIN_HELDOUT:
        return np.arange(n), None
    perm = rng.permutation(n)
    return np.sort(perm[k:]), np.sort(perm[:k])


def _per_row_loss(s, y) -> np.ndarray:
    return np.logaddexp(0.0, -y * s)


def fit_stack(F, y, ridge: float = 1e-6) -> np.ndarray:
    """Logistic regression of ``y`` (±1) on the columns of ``F`` plus an intercept (Newton; tiny ridge)."""
    A = np.column_stack([np.ones(F.shape[0]), F])
    w = np.zeros(A.shape[1])
    for _ in range(100):
        s = A @ w
        p = 1.0 / (1.0 + np.exp(-np.clip(y * s, -50, 50)))
        g = -(A.T @ (y * (1.0 - p))) / len(y) + ridge * w
        h = (A * (p * (1.0 - p))[:, None]).T @ A / len(y) + ridge * np.eye(A.shape[1])
        step = np.linalg.solve(h, g)
        w -= step
        if float(np.abs(step).max()) < 1e-10:
            break
    return w


def choose(own_logit, expert_sum, y, rng: np.random.Generator) -> Choice:
    """Step 3 of the module docstring on the held-out rows: ``own_logit`` (the label party's model fitted without
    them), ``expert_sum`` = Σ_m (expert_m − prior), ``y`` in ±1."""
    own_logit, expert_sum, y = (np.asarray(v, dtype=np.float64) for v in (own_logit, expert_sum, y))
    n = len(y)
    F = np.column_stack([own_logit, expert_sum])
    folds = rng.permutation(n) % FOLDS
    stacked = np.empty(n)
    for k in range(FOLDS):
        w = fit_stack(F[folds != k], y[folds != k])
        stacked[folds == k] = w[0] + F[folds == k] @ w[1:]
    l_own, l_st = _per_row_loss(own_logit, y), _per_row_loss(stacked, y)
    d = l_st - l_own
    tol = max(2.0 * float(d.std(ddof=1)) / math.sqrt(n), 1e-6 * float(l_own.mean()))
    if float(d.mean()) < -tol:
        w = fit_stack(F, y)
        return Choice("stacked", (float(w[0]), float(w[1]), float(w[2])), n, float(l_own.mean()),
                      float(l_st.mean()), tol)
    return Choice("own model", (0.0, 1.0, 0.0), n, float(l_own.mean()), float(l_st.mean()), tol)
