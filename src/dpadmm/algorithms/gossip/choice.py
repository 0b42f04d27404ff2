"""Each node's choice of the model it uses: the recalibrated consensus, its own model or its own base rate — judged
by cross-validation on its own rows. Local: nothing released, no ε spent.

After a private gossip run node i holds the consensus model ``w_i`` and its own prepared rows ``x̃ = (z, 1)``
(:func:`.mechanism.prepare`). The consensus is not always what serves it best: on natural nodes (a hospital, a
year, a department) a node's own rows may be better described by a model of its own, and on a few hundred rows at
a small ε the consensus may carry less than the node's own base rate (issue 38: on a 13,649-row panel each node's
own model matched or beat the consensus in 11–15 of 15 node-runs; on 1,380 rows over 5 nodes the consensus was
worse than the base rate on every seed at ε = 0.5). So the node compares, by K-fold cross-validation on its own
rows (:func:`choose`; folds stratified by label, ``K = min(5, the smaller class count)``):

* ``consensus``: the consensus model recalibrated on the training folds (:func:`.calibration.platt`), scored on
  the held-out fold — the node's recalibrated consensus model (:mod:`.calibration`);
* ``own``: L2-regularised logistic regression on the node's own rows alone (:func:`fit_own`, the intercept
  unpenalised), for each λ of :data:`LAMBDAS` — on its **raw** rows standardised by its own column means and
  standard deviations when it has them (a deployed node has its file; the simulation passes them): the node needs no
  DP column bounds for a model of its own, and at a small ε those bounds clip much of a column (quantiles up to
  0.25 and 0.75, :func:`dpadmm.privacy.ranges.quantile_level`). That model is handed over in raw units
  (``space = "raw"``: ``X @ w[:d] + w[d]``), the others on the prepared rows (``space = "prepared"``);
* ``base-rate``: the node's own smoothed base rate ``(N₊ + 1)/(N + 2)``;

and keeps the candidate with the lowest mean held-out log loss (the consensus on a tie), refitted on all its rows.
The consensus model was fitted with the node's rows among everyone's, so its held-out score is somewhat optimistic:
the comparison leans towards the consensus, which is the side to err on (it is what the network's budget bought).

**What it costs.** As for :mod:`.calibration`: the chosen model is a function of the node's own rows, the node's
to use and not to publish (no accountant covers it); the consensus model (the estimator's ``coefs_``) stays the
shareable output with the run's (ε, δ). The cross-validated losses are the node's local evaluation: they leave it
only in its own ``node_models.npz``, never in ``metrics.json``.

A node with fewer than 2 rows of a class cannot judge: it keeps the recalibrated consensus (``reason``)."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from scipy.linalg import LinAlgError
from scipy.linalg.lapack import dpotrf, dpotrs

from .calibration import platt, recalibrate

CANDIDATES = ("consensus", "own", "base-rate")
LAMBDAS = (0.1, 1.0, 10.0)  # the own model's ridge on the [−1, 1]-mapped columns (sum of losses + λ/2 ‖w‖²)
FOLDS = 5
NEWTON_ITER = 50
CHORD_RATE = 0.25  # a chord step must cut the Newton decrement to this share of the last one, else a fresh Hessian


class NodeChoice(NamedTuple):
    """A node's model (intercept last), its name (:data:`CANDIDATES`), the consensus's Platt (a, b), the mean
    held-out log loss of each candidate (local evaluation; NaN where not judged) and why."""

    model: np.ndarray
    choice: str
    a: float
    b: float
    cv: np.ndarray  # (3,) consensus, own (best λ), base-rate
    reason: str
    space: str = "prepared"  # the rows the model applies to: "prepared" (mechanism.prepare) or "raw" (own model)


def _log_loss(m: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(np.logaddexp(0.0, -y * m)))


def fit_own(Xt: np.ndarray, y: np.ndarray, lam: float) -> np.ndarray:
    """argmin_w Σ log(1 + exp(−y w·x̃)) + (λ/2)‖w[:d]‖² by Newton's method with step halving (the intercept, the
    last column, unpenalised; a tiny ridge on it keeps the Hessian invertible on separable rows)."""
    Xt = np.asarray(Xt, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    reg = np.full(Xt.shape[1], float(lam))
    reg[-1] = 1e-8

    def f(w):
        return float(np.logaddexp(0.0, -y * (Xt @ w)).sum() + 0.5 * reg @ (w * w))

    w = np.zeros(Xt.shape[1])
    fw = f(w)
    for _ in range(NEWTON_ITER):
        m = Xt @ w
        p = 0.5 * (1.0 + np.tanh(0.5 * m))  # σ(m), overflow-free
        g = Xt.T @ (p - (y > 0)) + reg * w
        H = (Xt * (p * (1.0 - p))[:, None]).T @ Xt + np.diag(reg)
        step = np.linalg.solve(H, g)
        if 0.5 * float(g @ step) <= 1e-12 * max(1.0, abs(fw)):
            break
        k = 1.0
        while k > 1e-8:
            w1 = w - step if k == 1.0 else w - k * step
            f1 = f(w1)
            if f1 <= fw:
                break
            k *= 0.5
        else:
            break
        w, fw = w1, f1
    return w


def _loss_sigma(m: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``log(1 + exp(−y m))`` and ``σ(m)`` per row from one exponential (no overflow for any m)."""
    e = np.abs(m)
    np.negative(e, out=e)
    np.exp(e, out=e)
    loss = -y * m
    np.maximum(loss, 0.0, out=loss)
    loss += np.log1p(e)
    sig = np.where(m >= 0, 1.0, e)
    e += 1.0
    sig /= e
    return loss, sig


def cho_factor(M: np.ndarray) -> np.ndarray:
    """scipy's ``cho_factor(M)[0]`` (upper), LAPACK's ``dpotrf`` called directly: the same numbers without the
    wrapper's checks (M is a finite Gram matrix plus a ridge here), a third of a small node's choice."""
    c, info = dpotrf(M, lower=0, clean=0)
    if info != 0:
        raise LinAlgError(f"{info}-th leading minor of the array is not positive definite")
    return c


def cho_solve(c: np.ndarray, g: np.ndarray) -> np.ndarray:
    """scipy's ``cho_solve((c, False), g)``: LAPACK's ``dpotrs`` on :func:`cho_factor`'s factor."""
    return dpotrs(c, g, lower=0)[0]


def _minimise(X, y, reg, w, M, curvature):
    """The minimiser of Σ log(1 + exp(−y_i w·x_i)) + ½ Σ reg w² over the rows ``X`` from ``w`` by Newton's method with step halving, the Newton matrix ``M`` a Hessian
    approximation (chord steps) refreshed by ``curvature(d)`` (the loss's exact Hessian for per-row weights
    ``d = σ(1 − σ)``) where a step leaves more than :data:`CHORD_RATE` of the last one's decrement or needs halving. It stops
    as :func:`fit_own` does (Newton decrement ≤ 1e-12 × the objective) after taking that last, small step (a chord
    step leaves an error its next step would cut by its contraction rate)."""
    F = None if M is None else cho_factor(M)  # factored once per Newton matrix: chord steps reuse it
    pos, D = (y > 0).astype(np.float64), np.diag(reg)
    loss, p = _loss_sigma(X @ w, y)
    f = float(loss.sum() + 0.5 * reg @ (w * w))
    last = math.inf
    for _ in range(NEWTON_ITER):
        r = p - pos
        g = X.T @ r + reg * w
        fresh = F is None
        if fresh:
            F = cho_factor(curvature(p * (1.0 - p)) + D)
        step = cho_solve(F, g)
        dec = 0.5 * float(g @ step)
        if dec <= 1e-12 * max(1.0, abs(f)):
            return w - step
        if not fresh and dec > CHORD_RATE * last:  # the chord matrix has gone stale: the Hessian here
            F = cho_factor(curvature(p * (1.0 - p)) + D)
            step = cho_solve(F, g)
            dec = 0.5 * float(g @ step)
        last = dec
        k = 1.0
        while k > 1e-8:
            w1 = w - step if k == 1.0 else w - k * step
            loss, p1 = _loss_sigma(X @ w1, y)
            f1 = float(loss.sum() + 0.5 * reg @ (w1 * w1))
            if f1 <= f:
                break
            k *= 0.5
            F = None  # a step that needs halving: the Hessian at the next point
        else:
            return w
        w, f, p = w1, f1, p1
    return w


def _own_cv(Xo: np.ndarray, y: np.ndarray, fold: np.ndarray, k: int) -> list[tuple[float, np.ndarray]]:
    """For each λ of :data:`LAMBDAS`: the summed held-out log loss of :func:`fit_own` over the k folds, and
    :func:`fit_own` on all rows — the same minimisers (to the solver's tolerance), the folds sharing the work. The rows
    are sorted by fold once; the all-rows fit comes first (exact Newton from zero for the first λ, from the previous
    λ's model with its Hessian after); at its model one pass gives each fold's Hessian piece ``H_j = Σ_{i in j}
    d_i x_i x_iᵀ``, and fold j's fit starts from the all-rows model with ``H − H_j`` (its training rows' Hessian
    there) as its Newton matrix: held-out rows move the model little, so chord steps converge in a few gradient
    passes, with exact Hessians only where they do not (:func:`_minimise`). Each fold's fit runs on its training rows
    alone (a view: the rows are laid out once with folds 0 … k−2 repeated after them, so the folds after j and then
    those before are one slice), not on all rows with the held-out ones weighted 0: four fifths of the work per
    Newton step, the same minimiser up to the order of the sums."""
    order = np.argsort(fold, kind="stable")
    n = len(order)
    cut = np.searchsorted(fold[order], np.arange(k + 1))
    blocks = [slice(cut[j], cut[j + 1]) for j in range(k)]
    # column-major: the matrix-vector products are the cost
    twice = np.r_[order, order[:cut[k - 1]]]
    X2, y2 = np.empty((len(twice), Xo.shape[1]), order="F"), y[twice]
    for c in range(Xo.shape[1]):  # gathered column by column straight into column-major rows: no full-size buffer
        np.take(Xo[:, c], twice, out=X2[:, c])
    X, ys = X2[:n], y2[:n]
    train = [slice(cut[j + 1], cut[j + 1] + n - (cut[j + 1] - cut[j])) for j in range(k)]

    def gram(d, rows=slice(None), X=X):
        A = X[rows] * np.sqrt(d[rows])[:, None]
        return A.T @ A

    out, w, P = [], np.zeros(X.shape[1]), None
    for lam in LAMBDAS:
        reg = np.full(X.shape[1], float(lam))
        reg[-1] = 1e-8
        w = _minimise(X, ys, reg, w, None if P is None else P.sum(axis=0) + np.diag(reg), gram)
        if P is None:  # each fold's Hessian piece at the first all-rows model, the chord matrices for every λ
            _, p = _loss_sigma(X @ w, ys)
            P = np.stack([gram(p * (1.0 - p), b) for b in blocks])
        held = 0.0
        for j, b in enumerate(blocks):
            Xj, yj = X2[train[j]], y2[train[j]]
            wj = _minimise(Xj, yj, reg, w, P.sum(axis=0) - P[j] + np.diag(reg),
                           lambda d, Xj=Xj: gram(d, X=Xj))
            held += float(_loss_sigma(X[b] @ wj, ys[b])[0].sum())
        out.append((held, w))
    return out


def _folds(y: np.ndarray, k: int, seed: int) -> np.ndarray:
    """A fold index per row, each class spread evenly over the k folds (a seeded permutation within each class)."""
    rng = np.random.default_rng(seed)
    fold = np.empty(len(y), dtype=int)
    for cls in (-1.0, 1.0):
        idx = np.flatnonzero(y == cls)
        fold[rng.permutation(idx)] = np.arange(idx.size) % k
    return fold


def _rate_logit(y: np.ndarray) -> float:
    p = (float(np.sum(y > 0)) + 1.0) / (len(y) + 2.0)
    return math.log(p / (1.0 - p))


def standardised(X: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(Z, mean, sd)``: the node's raw rows standardised by its own column statistics, intercept column appended
    (a missing value at its column's mean; a constant column's sd taken as 1)."""
    X = np.asarray(X, dtype=np.float64)
    mu = np.nan_to_num(np.nanmean(X, axis=0)) if X.size else np.zeros(X.shape[1])
    sd = np.nan_to_num(np.nanstd(X, axis=0))
    sd[sd <= 0] = 1.0
    Z = np.nan_to_num((X - mu) / sd)
    return np.column_stack([Z, np.ones(len(Z))]), mu, sd


def to_raw_units(w: np.ndarray, mu: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """A model on standardised rows as the same linear model on raw rows: ``(w/sd, w_0 − Σ μ w/sd)``."""
    coef = w[:-1] / sd
    return np.append(coef, w[-1] - float(mu @ coef))


def choose(Xt: np.ndarray, y: np.ndarray, w: np.ndarray, *, X_raw=None, folds: int = FOLDS,
           seed: int = 0) -> NodeChoice:
    """Node-side: the model node i uses (module docstring), from its prepared rows ``Xt`` (intercept column last),
    its labels ``y`` (±1), its consensus model ``w`` and, for its own model, its raw rows ``X_raw`` (None: its own
    model on the prepared rows)."""
    Xt = np.asarray(Xt, dtype=np.float64)
    Xo, mu, sd = standardised(X_raw) if X_raw is not None else (Xt, None, None)
    y = np.where(np.asarray(y, dtype=np.float64) > 0, 1.0, -1.0)
    w = np.asarray(w, dtype=np.float64)
    recal, a, b = recalibrate(Xt, y, w)
    k = min(int(folds), int(np.sum(y > 0)), int(np.sum(y < 0)))
    if k < 2:
        return NodeChoice(recal, "consensus", a, b, np.full(3, np.nan),
                          "fewer than 2 rows of a class: not judged, the recalibrated consensus")
    fold = _folds(y, k, seed)
    s = Xt @ w
    losses = np.zeros(2 + len(LAMBDAS))  # consensus, base rate, own at each λ: summed held-out log losses
    for j in range(k):
        tr, te = fold != j, fold == j
        aj, bj = platt(s[tr], y[tr])
        losses[0] += np.logaddexp(0.0, -y[te] * (aj * s[te] + bj)).sum()
        losses[1] += np.logaddexp(0.0, -y[te] * _rate_logit(y[tr])).sum()
    own_fits = _own_cv(Xo, y, fold, k)
    losses[2:] = [held for held, _ in own_fits]
    losses /= len(y)
    best_own = 2 + int(np.argmin(losses[2:]))
    cv = np.array([losses[0], losses[best_own], losses[1]])
    pick = int(np.argmin(cv))  # the first (the consensus) on a tie
    if cv[pick] >= cv[0]:
        pick = 0
    if pick == 0:
        return NodeChoice(recal, "consensus", a, b, cv, f"{k}-fold CV on its own rows: the recalibrated consensus "
                                                          "is the best")
    if pick == 1:
        lam = LAMBDAS[best_own - 2]
        own = own_fits[best_own - 2][1]
        why = f"{k}-fold CV on its own rows: its own model (λ = {lam:g}) beats the recalibrated consensus"
        if mu is None:
            return NodeChoice(own, "own", a, b, cv, why)
        return NodeChoice(to_raw_units(own, mu, sd), "own", a, b, cv, why, "raw")
    model = np.zeros_like(w)
    model[-1] = _rate_logit(y)
    return NodeChoice(model, "base-rate", a, b, cv, f"{k}-fold CV on its own rows: its own base rate beats the "
                                                    "recalibrated consensus and its own model")
