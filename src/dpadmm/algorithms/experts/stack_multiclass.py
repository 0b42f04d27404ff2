"""The label party's choice for the multiclass target: a multinomial logistic stack of its own model and the experts'
scores, or its own model — :mod:`.stack`'s rule with the multinomial log loss in place of the squared error.

On held-out rows of its own (:func:`.calibrate.split`: their labels are never sent, every party fits without them)
the label party has its own multinomial model's log-probabilities (fitted without them), each party's K scores
there (records outside every party's training set: post-processing of their DP releases) and its exact labels. It
fits a ridge multinomial logistic regression of the label on ``[log p_own, scores_1, …, scores_M]``
(:data:`STACK_C`), compares its log loss with the own model's by K-fold cross-validation repeated over ``REPEATS``
fold draws, and keeps the stack only if it is lower by more than two standard errors of the paired per-row
difference; otherwise its own model (fitted on all its rows: exactly "the label party alone"). Fewer than
``2·FOLDS`` held-out rows: its own model.

Privacy: none spent. Everything here is post-processing at the label party of the parties' releases and its own
data, which never leaves it; nothing computed here is sent.
"""

from __future__ import annotations

import math

import numpy as np
from sklearn.linear_model import LogisticRegression

from .calibrate import FOLDS, REPEATS, Choice

#: the stack's inverse ridge (scikit-learn's C) on its features
STACK_C = 1.0
#: probabilities are floored here before a log (an own model certain of a wrong class costs a finite loss)
P_FLOOR = 1e-12


def features(own_proba, experts) -> np.ndarray:
    """The stack's features: the own model's log-probabilities and every party's K scores, side by side."""
    own = np.log(np.clip(np.asarray(own_proba, dtype=np.float64), P_FLOOR, 1.0))
    return np.column_stack([own] + [np.asarray(e, dtype=np.float64) for e in experts])


def _fit(F, idx, k: int) -> LogisticRegression:
    return LogisticRegression(C=STACK_C, max_iter=5000).fit(F, idx) if np.unique(idx).size > 1 else None


def _proba(model, F, idx_fit, k: int) -> np.ndarray:
    """The stack's probabilities over all K classes (a fold missing a class gives it the floor)."""
    out = np.full((F.shape[0], k), P_FLOOR)
    if model is None:
        out[:, int(idx_fit[0])] = 1.0
    else:
        out[:, model.classes_] = model.predict_proba(F)
    return out / out.sum(axis=1, keepdims=True)


def _nll(P, idx) -> np.ndarray:
    return -np.log(np.clip(P[np.arange(idx.size), idx], P_FLOOR, 1.0))


def choose(own_proba, experts, idx, k: int, rng: np.random.Generator):
    """The module docstring's choice on the held-out rows: ``own_proba`` (rows, K), ``experts`` one (rows, K) score
    matrix per party, ``idx`` the exact labels' class indices. Returns ``(Choice, stack model or None)``;
    ``Choice.loss_*`` are mean log losses."""
    idx = np.asarray(idx, dtype=np.int64)
    n, m = idx.size, len(experts)
    if n < 2 * FOLDS:
        return Choice("own model", (0.0, 1.0) + (0.0,) * m, n, math.nan, math.nan, math.nan), None
    F = features(own_proba, experts)
    stacked = np.zeros(n)
    for _ in range(REPEATS):
        folds = rng.permutation(n) % FOLDS
        for f in range(FOLDS):
            tr, te = folds != f, folds == f
            stacked[te] += _nll(_proba(_fit(F[tr], idx[tr], k), F[te], idx[tr], k), idx[te]) / REPEATS
    l_own = _nll(np.asarray(own_proba, dtype=np.float64), idx)
    d = stacked - l_own
    tol = max(2.0 * float(d.std(ddof=1)) / math.sqrt(n), 1e-6 * float(l_own.mean()))
    if float(d.mean()) < -tol and np.unique(idx).size > 1:
        return Choice("stacked", (0.0, 1.0) + (1.0,) * m, n, float(l_own.mean()), float(stacked.mean()),
                      tol), _fit(F, idx, k)
    return Choice("own model", (0.0, 1.0) + (0.0,) * m, n, float(l_own.mean()), float(stacked.mean()), tol), None


def apply(model, k: int, own_proba, experts) -> np.ndarray:
    """The label party's final probabilities: its own model's, or the stack's on its own and the parties' scores."""
    own = np.asarray(own_proba, dtype=np.float64)
    if model is None:
        return own
    return _proba(model, features(own, experts), np.zeros(1, dtype=np.int64), k)


def facts(choice: Choice) -> dict:
    """The choice's public record (``calibration`` facts) with the multiclass names."""
    return {"choice": choice.kind, "heldout_rows": choice.heldout_rows, "heldout_log_loss_own": choice.loss_own,
            "heldout_log_loss_stacked": choice.loss_stacked, "tolerance": choice.tolerance}
