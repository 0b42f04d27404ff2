"""The label party's choice for the multiclass target: a multinomial logistic stack of its own model and the experts'
scores, or its own model — :mod:`.stack`'s rule with the multinomial log loss in place of the squared error.

On held-out rows of its own (:func:`.calibrate.split`: their labels are never sent, every party fits without them)
the label party has its own multinomial model's log-probabilities (fitted without them), each party's K scores
there (records outside every party's training set: post-processing of their DP releases) and its exact labels. It
fits a ridge multinomial logistic regression of the label on the parties' scores with the own model's
log-probabilities as a fixed offset (:class:`Stack`; ridge :data:`STACK_RIDGE`/rows on the experts' weights: with few
rows the stack stays near the own model), compares its log loss with the own model's by K-fold cross-validation repeated over ``REPEATS``
fold draws, and keeps the stack only if it is lower by more than two standard errors of the paired per-row
difference; otherwise its own model (fitted on all its rows: exactly "the label party alone"). Fewer than
``2·FOLDS`` held-out rows: its own model.

Privacy: none spent. Everything here is post-processing at the label party of the parties' releases and its own
data, which never leaves it; nothing computed here is sent.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from scipy.optimize import minimize

from .calibrate import FOLDS, REPEATS, Choice

#: the stack's ridge on the experts' weights (scores standardised on the rows it is fitted on), times 1/rows
STACK_RIDGE = 1.0
#: probabilities are floored here before a log (an own model certain of a wrong class costs a finite loss)
P_FLOOR = 1e-12


class Stack(NamedTuple):
    """``logits = log p_own + c + ((S − mu)/sd) W``: the own model's log-probabilities as an offset (weight 1), so the
    zero stack is the own model (up to the intercepts)."""

    c: np.ndarray
    W: np.ndarray
    mu: np.ndarray
    sd: np.ndarray


def features(experts) -> np.ndarray:
    """The experts' scores side by side (K per party)."""
    return np.column_stack([np.asarray(e, dtype=np.float64) for e in experts])


def log_own(own_proba) -> np.ndarray:
    return np.log(np.clip(np.asarray(own_proba, dtype=np.float64), P_FLOOR, 1.0))


def _softmax(z) -> np.ndarray:
    z = np.exp(z - z.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def _fit(O, S, idx, k: int) -> Stack:
    """The ridge multinomial stack with offset ``O`` (L-BFGS on a smooth strongly convex objective in W)."""
    n, p = S.shape
    mu, sd = S.mean(axis=0), S.std(axis=0)
    sd = np.where(sd > 0, sd, 1.0)
    Z = (S - mu) / sd
    Y = np.zeros((n, k))
    Y[np.arange(n), idx] = 1.0
    ridge = STACK_RIDGE / n

    def f(theta):
        c, W = theta[:k], theta[k:].reshape(p, k)
        L = O + c + Z @ W
        m = L.max(axis=1, keepdims=True)
        lse = (m + np.log(np.exp(L - m).sum(axis=1, keepdims=True))).ravel()
        G = (_softmax(L) - Y) / n
        val = float(np.mean(lse - L[np.arange(n), idx])) + 0.5 * ridge * float(np.sum(W * W))
        return val, np.r_[G.sum(axis=0), (Z.T @ G + ridge * W).ravel()]

    theta = minimize(f, np.zeros(k + p * k), jac=True, method="L-BFGS-B", options={"maxiter": 2000}).x
    return Stack(theta[:k], theta[k:].reshape(p, k), mu, sd)


def _proba(model: Stack, O, S) -> np.ndarray:
    return _softmax(O + model.c + ((S - model.mu) / model.sd) @ model.W)


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
    O, S = log_own(own_proba), features(experts)
    stacked = np.zeros(n)
    for _ in range(REPEATS):
        folds = rng.permutation(n) % FOLDS
        for f in range(FOLDS):
            tr, te = folds != f, folds == f
            stacked[te] += _nll(_proba(_fit(O[tr], S[tr], idx[tr], k), O[te], S[te]), idx[te]) / REPEATS
    l_own = _nll(np.asarray(own_proba, dtype=np.float64), idx)
    d = stacked - l_own
    tol = max(2.0 * float(d.std(ddof=1)) / math.sqrt(n), 1e-6 * float(l_own.mean()))
    if float(d.mean()) < -tol:
        return Choice("stacked", (0.0, 1.0) + (1.0,) * m, n, float(l_own.mean()), float(stacked.mean()),
                      tol), _fit(O, S, idx, k)
    return Choice("own model", (0.0, 1.0) + (0.0,) * m, n, float(l_own.mean()), float(stacked.mean()), tol), None


def apply(model, k: int, own_proba, experts) -> np.ndarray:
    """The label party's final probabilities: its own model's, or the stack's on its own and the parties' scores."""
    own = np.asarray(own_proba, dtype=np.float64)
    if model is None:
        return own
    return _proba(model, log_own(own), features(experts))


def facts(choice: Choice) -> dict:
    """The choice's public record (``calibration`` facts) with the multiclass names."""
    return {"choice": choice.kind, "heldout_rows": choice.heldout_rows, "heldout_log_loss_own": choice.loss_own,
            "heldout_log_loss_stacked": choice.loss_stacked, "tolerance": choice.tolerance}
