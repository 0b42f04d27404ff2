"""The label party's refit solver: regularised fits of a linear score over its block and a few extra columns,
several at once (the full fit, or every cross-validation fold together).

Problem ``j`` of a batch: ``argmin_w (1/n_j) Σ_{i ∈ rows_j} ℓ(a_iᵀw + base_i, Y_i) + ½ Σ_c pen_c w_c²`` with
``a_i = (d_i, e_i)``: the label party's row ``d_i`` (dense or CSR, never copied) and a few dense extra columns
``e_i`` (the intercept's 1, the others' offset). ``rows_j`` is every row (one problem) or, for K-fold
cross-validation, the rows ``i ≢ j (mod K)`` (fold j held out) — the K problems share each product with the
block: the scores of all K candidates are one ``D @ W`` and their gradients one ``Dᵀ G``.

Newton's method with Armijo backtracking, at the cost of few Hessians (:func:`fit`): a problem's Hessian
``Σ ℓ''·a aᵀ/n_j + diag(pen)`` is rebuilt only when the last step reduced the Newton decrement
``gᵀH⁻¹g`` by less than :data:`REFRESH` (or had to backtrack); otherwise the step reuses it (a chord step:
near the optimum it converges as fast as the Hessian is accurate). The folds' first Hessians come from one
pass over the rows at the full fit's optimum (:func:`fold_hessians`): every fold's weighted Gram is the total
minus its held-out rows'. A problem stops once its decrement is at most :data:`DECREMENT_TOL`, or stalls
below :data:`ROUNDING` (the floor the gradient's rounding sets), after one last step: the minimiser to
rounding, as a Newton iteration run until its steps no longer change the objective finds it. Weighted Grams are formed in blocks of
:data:`CHUNK` rows (no N × k temporaries). Above :data:`NEWTON_MAX_COLUMNS` columns, L-BFGS instead (no
k × k matrix), one problem at a time.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.linalg import LinAlgError, cho_factor, cho_solve, lu_factor, lu_solve

#: a problem's Hessian is rebuilt when its last step kept more than this fraction of the Newton decrement (a
#: rebuilt Hessian costs about three passes over the rows, a step two: below 1e-2 the chord steps are cheaper)
REFRESH = 1e-2
#: a problem is solved once its Newton decrement gᵀH⁻¹g (twice the objective's distance to the optimum) is below
#: this, or below :data:`ROUNDING` and no longer falling (the gradient's rounding floor); its last step is taken
DECREMENT_TOL = 1e-24
ROUNDING = 1e-14
#: steps from a decrement below this (relative to the objective) skip the line search: the decrease they make is
#: within the rounding of a mean over many rows, and so close to the optimum a Newton or chord step contracts
NEAR = 1e-10
#: rows per block of a weighted Gram (a multiple of every fold count used here; bounds the temporaries)
CHUNK = 5 * 2048
#: Newton (k × k Hessians) up to this many columns, L-BFGS beyond
NEWTON_MAX_COLUMNS = 1000


class Design:
    """The columns ``[D, E]`` of a refit without copying D (dense C-contiguous or CSR) — E: (N, e) dense."""

    def __init__(self, D, E: np.ndarray):
        self.D, self.E = D, np.asarray(E, dtype=np.float64).reshape(D.shape[0], -1)
        self.n, self.d = D.shape
        self.k = self.d + self.E.shape[1]

    def dot(self, W: np.ndarray) -> np.ndarray:
        """``A @ W`` for W of shape (k,) or (k, F)."""
        out = np.asarray(self.D @ W[:self.d])
        return out + self.E @ W[self.d:] if self.E.shape[1] else out

    def tdot(self, G: np.ndarray) -> np.ndarray:
        """``Aᵀ @ G`` for G of shape (N,) or (N, F)."""
        return np.concatenate([np.asarray(self.D.T @ G), self.E.T @ G], axis=0)

    def grams(self, h: np.ndarray, folds: int = 1) -> np.ndarray:
        """``G[f] = Σ_{i ≡ f (mod folds)} h_i a_i a_iᵀ`` (shape (folds, k, k)); h ≥ 0."""
        out = np.zeros((folds, self.k, self.k))
        if sp.issparse(self.D):
            for f in range(folds):
                rows = slice(f, None, folds)
                A = sp.hstack([self.D[rows], sp.csr_matrix(self.E[rows])], format="csr")
                out[f] = (A.T @ A.multiply(h[rows][:, None])).toarray()
            return out
        root = np.sqrt(h)
        for c0 in range(0, self.n, CHUNK):  # c0 ≡ 0 (mod folds): row c0 + j is in fold j mod folds
            c1 = min(c0 + CHUNK, self.n)
            B = np.hstack([self.D[c0:c1], self.E[c0:c1]])
            B *= root[c0:c1, None]
            for f in range(folds):
                Bf = B[f::folds]
                out[f] += Bf.T @ Bf  # a symmetric rank-k update (BLAS syrk)
        return out


def _factor(H: np.ndarray):
    """A solver of ``H p = g``: Cholesky, or LU where rounding left H not numerically positive definite (a Huber
    loss with every row in its linear part gives unpenalised columns zero curvature)."""
    try:
        fac = cho_factor(H)
        return lambda g: cho_solve(fac, g)
    except LinAlgError:
        fac = lu_factor(H)
        return lambda g: lu_solve(fac, g)


def _masks(n: int, folds: int | None):
    """(row weights (N, F) or None, rows per problem (F,))."""
    if folds is None:
        return None, np.array([float(n)])
    held = np.arange(n) % folds
    M = (held[:, None] != np.arange(folds)[None, :]).astype(np.float64)
    return M, M.sum(axis=0)


def fold_hessians(design: Design, h: np.ndarray, pen: np.ndarray, folds: int) -> list[np.ndarray]:
    """The K training folds' Hessians at one point (``h`` = ℓ'' there), from one pass over the rows."""
    G = design.grams(h, folds)
    total = G.sum(axis=0)
    n_tr = design.n - np.array([len(range(f, design.n, folds)) for f in range(folds)], dtype=np.float64)
    return [(total - G[f]) / n_tr[f] + np.diag(pen) for f in range(folds)]


def fit(design: Design, base, labels, loss, pen, W0, *, folds: int | None = None, H0=None,
        max_iter: int = 200) -> np.ndarray:
    """Minimisers of the batch's problems (module docstring), one column each: ``folds=None`` one problem over
    every row (W0 of shape (k,) or (k, 1)), ``folds=K`` the K training folds (W0 (k, K)). ``H0``: the problems'
    Hessians at W0 if known (else built there)."""
    squeeze = np.ndim(W0) == 1
    W = np.array(W0, dtype=np.float64).reshape(design.k, -1)
    pen = np.asarray(pen, dtype=np.float64)
    if design.k > NEWTON_MAX_COLUMNS:
        W = _lbfgs(design, base, labels, loss, pen, W, folds)
        return W[:, 0] if squeeze else W
    M, n_j = _masks(design.n, folds)
    F = W.shape[1]
    y2 = labels[:, None]
    eye = 1e-12 * np.eye(design.k)

    def weighted(v, cols):
        return v * M[:, cols] if M is not None else v

    def objective(S, Wc, cols):
        return weighted(loss.value(S, y2), cols).sum(axis=0) / n_j[cols] + 0.5 * (pen[:, None] * Wc * Wc).sum(axis=0)

    def hessian(S, j):
        h = loss.hess(S[:, j], labels)
        h = h * M[:, j] if M is not None else h
        return _factor(design.grams(h)[0] / n_j[j] + np.diag(pen) + eye)

    S = design.dot(W) + base[:, None]
    val = objective(S, W, slice(None))
    H = [_factor(H0[j] + eye) for j in range(F)] if H0 is not None else [hessian(S, j) for j in range(F)]
    last_dec = np.full(F, np.inf)  # each problem's decrement before its last step
    rebuild = np.zeros(F, dtype=bool)  # its last step had to backtrack
    active = list(range(F))
    for _ in range(max_iter):
        if not active:
            break
        cols = np.array(active)
        G = design.tdot(weighted(loss.grad(S[:, cols], y2), cols)) / n_j[cols] + pen[:, None] * W[:, cols]
        P = np.empty_like(G)
        dec = np.empty(len(cols))
        for c, j in enumerate(cols):
            P[:, c] = H[j](G[:, c])
            dec[c] = G[:, c] @ P[:, c]
            if rebuild[j] or dec[c] > REFRESH * last_dec[j]:  # the stale Hessian no longer pays: rebuild it
                H[j] = hessian(S, j)
                P[:, c] = H[j](G[:, c])
                dec[c] = G[:, c] @ P[:, c]
        done = (dec <= DECREMENT_TOL) | ((dec <= ROUNDING) & (dec > 0.25 * last_dec[cols]))
        W[:, cols[done]] -= P[:, done]  # a last step that moves the objective by under 1e-24
        keep = ~done
        cols, P, dec = cols[keep], P[:, keep], dec[keep]
        t = np.ones(len(cols))
        # near the objective's rounding a line search cannot tell a decrease: those steps are taken as they are
        near = dec <= NEAR * np.maximum(1.0, np.abs(val[cols]))
        if near.any():
            js = cols[near]
            W[:, js] -= P[:, near]
            S[:, js] = design.dot(W[:, js]) + base[:, None]
            val[js] = objective(S[:, js], W[:, js], js)
        pending = np.flatnonzero(~near)
        while pending.size:  # Armijo backtracking, every problem with its own step length
            js = cols[pending]
            Wt = W[:, js] - t[pending] * P[:, pending]
            St = design.dot(Wt) + base[:, None]
            vt = objective(St, Wt, js)
            ok = (vt <= val[js] - 1e-4 * t[pending] * dec[pending]) | (t[pending] < 1e-10)
            W[:, js[ok]], S[:, js[ok]], val[js[ok]] = Wt[:, ok], St[:, ok], vt[ok]
            pending = pending[~ok]
            t[pending] *= 0.5
        stalled = t < 1e-10  # rounding: no step decreases the objective any more
        last_dec[cols] = dec
        rebuild[cols] = t < 1.0  # a step that had to backtrack was far from the Newton regime
        active = [int(j) for j in cols[~stalled]]
    return W[:, 0] if squeeze else W


def _lbfgs(design: Design, base, labels, loss, pen, W, folds):
    """Wide blocks: L-BFGS per problem (rows outside a training fold weighted 0: no row copies)."""
    from scipy.optimize import minimize  # third-party, needed by this path only (start-up cost)

    M, n_j = _masks(design.n, folds)
    for j in range(W.shape[1]):
        m = M[:, j] if M is not None else 1.0

        def f(w, m=m, nj=n_j[j]):
            s = design.dot(w) + base
            val = float(np.sum(m * loss.value(s, labels))) / nj + 0.5 * float(pen @ (w * w))
            return val, design.tdot(m * loss.grad(s, labels)) / nj + pen * w

        W[:, j] = minimize(f, W[:, j], jac=True, method="L-BFGS-B",
                           options={"maxiter": 5000, "gtol": 1e-10, "ftol": 1e-14}).x
    return W


__all__ = ["CHUNK", "DECREMENT_TOL", "Design", "NEAR", "NEWTON_MAX_COLUMNS", "REFRESH", "ROUNDING", "fit", "fold_hessians"]
