"""The local solver of graph consensus [Zhang]: each node's exact minimiser of its augmented logistic objective
(Newton on the rotated data, curvature bound factored once), and the pooled centralised solution.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np
from scipy.special import expit

from .schedules import LOGISTIC_C1

def _pad(blocks: Sequence[np.ndarray], fill=0.0) -> np.ndarray:
    bmax = max(b.shape[0] for b in blocks)
    out = np.full((len(blocks), bmax) + blocks[0].shape[1:], fill, dtype=np.float64)
    for k, b in enumerate(blocks):
        out[k, :b.shape[0]] = b
    return out


MARGIN_CLIP = 300.0  # |y xᵀf| beyond this changes ℒ, ℒ', ℒ'' by < e^-300: clipped to avoid subnormal floats


def _margins(X, y, f):
    """``−y xᵀf`` per node and sample, clipped to ±MARGIN_CLIP (subnormal numbers slow BLAS ~100×)."""
    return np.clip(-y * np.matmul(X, f[..., None])[..., 0], -MARGIN_CLIP, MARGIN_CLIP)


def _objective(X, y, w, reg_total, b, f):
    """Per-node value of ``(C/B)Σ ℒ(y xᵀf) + ½ reg_total ‖f‖² + bᵀf`` (w = C/B · mask)."""
    return (w * np.logaddexp(0.0, _margins(X, y, f))).sum(axis=1) + 0.5 * reg_total * (f * f).sum(axis=1) + (b * f).sum(axis=1)


def local_newton(X: np.ndarray, y: np.ndarray, w: np.ndarray, reg_total: np.ndarray, b: np.ndarray,
                 f0: np.ndarray, *, tol: float = 1e-10, max_iter: int = 50, hess0: np.ndarray | None = None,
                 refresh: float = 0.25) -> tuple[np.ndarray, int, np.ndarray]:
    """Minimise ``φ_k(f) = Σ_n w_kn ℒ(y_kn x_knᵀf) + ½ r_k ‖f‖² + b_kᵀf`` for every node k at once.

    Shapes: X (K, B, d), y and w (K, B) (w = C/B_k on real rows, 0 on padding), reg_total r (K,),
    b and f0 (K, d). φ_k is r_k-strongly convex (r_k = ρ/N + 2η V_k > 0).

    Newton's method with a *lagged* Hessian: the loss Hessian ``H_k = Σ_n w ℒ'' x xᵀ`` is recomputed
    for a node only when its gradient norm fell by less than ``refresh`` in the last step (or when
    ``hess0`` is None), otherwise the previous one is reused (``(H_k + r_k I)`` stays SPD, so every
    step is a descent direction); Armijo backtracking per node; warm start at f0. Stops when every
    node's gradient norm is ≤ ``tol · (1 + ‖b_k‖)``. Returns (f, iterations, loss Hessians) — the
    Hessians let the next call (next ADMM round) start without recomputing them.
    """
    f = f0.copy()
    K, _, d = X.shape
    eye = np.eye(d)
    thresh = tol * (1.0 + np.linalg.norm(b, axis=1))
    H = np.zeros((K, d, d)) if hess0 is None else hess0.copy()
    Minv = np.zeros((K, d, d))
    stale = np.full(K, hess0 is None)
    fresh_inverse = np.zeros(K, dtype=bool)  # (H + rI)^-1 up to date for this call's r
    prev = np.full(K, np.inf)
    m = _margins(X, y, f)
    it = 0
    for it in range(1, max_iter + 1):
        p = expit(m)  # −ℒ'(y xᵀf) ∈ (0, 1)
        g = np.matmul((w * (-y * p))[:, None, :], X)[:, 0, :] + reg_total[:, None] * f + b  # Xᵀ(w ℒ') + r f + b
        gnorm = np.linalg.norm(g, axis=1)
        active = gnorm > thresh
        if not active.any():
            it -= 1
            break
        stale |= active & ~(gnorm <= refresh * prev)
        ref = np.flatnonzero(stale & active)
        if ref.size:
            Xr = X if ref.size == K else X[ref]
            h = w[ref] * p[ref] * (1.0 - p[ref])
            H[ref] = np.matmul((Xr * h[..., None]).transpose(0, 2, 1), Xr)
            stale[ref] = False
            fresh_inverse[ref] = False
        inv = np.flatnonzero(~fresh_inverse & active)
        if inv.size:
            Minv[inv] = np.linalg.inv(H[inv] + reg_total[inv, None, None] * eye)
            fresh_inverse[inv] = True
        prev = gnorm
        step = -np.matmul(Minv, g[..., None])[..., 0]
        step[~active] = 0.0
        phi0 = (w * np.logaddexp(0.0, m)).sum(axis=1) + 0.5 * reg_total * (f * f).sum(axis=1) + (b * f).sum(axis=1)
        slope = (g * step).sum(axis=1)
        s = np.ones(K)
        for _ in range(30):  # Armijo backtracking, all nodes at once
            trial = f + s[:, None] * step
            m_trial = _margins(X, y, trial)
            phi = (w * np.logaddexp(0.0, m_trial)).sum(axis=1) + 0.5 * reg_total * (trial * trial).sum(axis=1) \
                + (b * trial).sum(axis=1)
            ok = phi <= phi0 + 1e-4 * s * slope + 1e-12 * np.abs(phi0)
            if ok.all():
                break
            s = np.where(ok, s, 0.5 * s)
        stale |= active & (s < 1.0)  # a damped step: the Hessian is worth refreshing
        f, m = trial, m_trial
    return f, it, H


class Curvature(NamedTuple):
    """Per-node eigendecomposition ``M_k = V_k diag(s_k) V_kᵀ`` of a curvature model of the loss part of
    φ_k; every (M_k + r I)⁻¹ for any ridge r then costs two d × d products — no inverse when η changes."""

    vals: np.ndarray  # (K, d) eigenvalues ≥ 0
    vecs: np.ndarray  # (K, d, d)


def curvature_factor(X: np.ndarray, w: np.ndarray, h: np.ndarray | None = None, c1: float = LOGISTIC_C1) -> Curvature:
    """Eigendecomposition of ``Σ_n w_n h_n x_n x_nᵀ`` per node (X: (K, B, d), w and h: (K, B)).

    ``h = None`` uses h ≡ c1 = sup ℒ'' (the Böhning–Lindsay bound): then ``M_k ⪰ ∇²`` of the loss
    part everywhere, so the step ``−(M_k + rI)⁻¹g`` decreases φ_k without a line search.
    """
    weights = w * (c1 if h is None else h)
    M = np.matmul((X * weights[..., None]).transpose(0, 2, 1), X)
    vals, vecs = np.linalg.eigh(M)
    return Curvature(np.clip(vals, 0.0, None), vecs)


def rotated_data(X: np.ndarray, y: np.ndarray, bound: Curvature) -> np.ndarray:
    """``Z_k = (−y_k ∘ X_k) V_k`` per node: rows sign-folded (margins ``−y xᵀf = z̃ᵀf̃``) and rotated into
    the eigenbasis of the curvature bound, where the solver's preconditioner is diagonal."""
    return np.matmul(-y[..., None] * X, bound.vecs)


CHUNK_BYTES = 4 * 2**20
"""Nodes are solved in groups whose data fit in this many bytes, so that every iteration of a group
reads its data from cache rather than memory (1.5× faster on Adult, 100 nodes, than one stack)."""


def local_solve(Z: np.ndarray, w: np.ndarray, reg_total: np.ndarray, b: np.ndarray, f0: np.ndarray,
                bound: Curvature, *, tol: float = 1e-10, max_iter: int = 500) -> tuple[np.ndarray, np.ndarray]:
    """Minimise ``φ_k(f) = Σ_n w ℒ(y xᵀf) + ½ r_k ‖f‖² + b_kᵀf`` for every node k, each node on its own.

    ``Z`` = :func:`rotated_data` ``(X, y, bound)`` and ``bound`` = :func:`curvature_factor` ``(X, w)``,
    both computed once at setup; w (K, B), reg_total r (K,), b and f0 (K, d) as in :func:`local_newton`.

    Majorisation–minimisation (Böhning & Lindsay 1988): with ``M_k = c1 Σ_n w x xᵀ ⪰`` the loss
    Hessian everywhere (ℒ'' ≤ c1 = 1/4), ``φ_k(f + s) ≤ φ_k(f) + gᵀs + ½ sᵀ(M_k + r_k I)s``, whose
    minimiser ``s = −(M_k + r_k I)⁻¹ g`` decreases φ_k by at least ½ gᵀ(M_k + r_k I)⁻¹g: no line search,
    and the error contracts by ``1 − (r_k + λ_min(∇²ℓ)) / (r_k + λ_max(M_k))`` per step or better — fast
    once η (so r_k = ρ/N + 2η V_k) has grown. In the eigenbasis ``M_k = V_k diag(s_k) V_kᵀ`` (f̃ = Vᵀf,
    the data pre-rotated) the step is elementwise, ``f̃ ← f̃ − g̃ / (s_k + r_k)``, so a changing η costs no
    factorisation and no d × d product. Each iteration reads the node's data twice (margins,
    gradient); consecutive nodes are processed in groups that fit in cache (:data:`CHUNK_BYTES`),
    each group trimmed to its own longest node (uneven splits carry little padding), and a node
    stops as soon as ``‖g_k‖ ≤ tol (1 + ‖b_k‖)`` (‖g̃‖ = ‖g‖: V is orthogonal).

    Returns (f, iterations per node).
    """
    K, _, d = Z.shape
    V = bound.vecs
    ft = np.matmul(f0[:, None, :], V)[:, 0, :]  # f̃ = Vᵀf
    bt = np.matmul(b[:, None, :], V)[:, 0, :]
    its = np.zeros(K, dtype=np.int64)
    thresh = tol * (1.0 + np.linalg.norm(b, axis=1))
    rows = np.count_nonzero(w, axis=1)  # real rows per node (padding is at the end, with w = 0)
    lo = 0
    while lo < K:
        # a group of consecutive nodes whose data (up to the group's own longest node) fit in cache
        hi, bm = lo + 1, int(rows[lo])
        while hi < K and (hi + 1 - lo) * max(bm, int(rows[hi])) * d * 8 <= CHUNK_BYTES:
            bm = max(bm, int(rows[hi]))
            hi += 1
        sl = slice(lo, hi)
        lo = hi
        bm = max(bm, 1)
        Zc, wc, rc, bc, fc, th = Z[sl, :bm], w[sl, :bm], reg_total[sl], bt[sl], ft[sl], thresh[sl]
        inv = 1.0 / (bound.vals[sl] + rc[:, None])
        n = fc.shape[0]
        g = _rotated_grad(Zc, wc, rc, bc, fc)
        act = np.arange(n)
        for _ in range(max_iter):
            act = act[np.linalg.norm(g[act], axis=1) > th[act]]
            if act.size == 0:
                break
            fc[act] -= g[act] * inv[act]
            if 2 * act.size >= n:  # most still active: the whole group, no copy of its data
                g_all = _rotated_grad(Zc, wc, rc, bc, fc)
                g[act] = g_all[act]
            else:
                g[act] = _rotated_grad(Zc[act], wc[act], rc[act], bc[act], fc[act])
            its[sl.start + act] += 1
    return np.matmul(V, ft[..., None])[..., 0], its


def _rotated_grad(Z, w, r, b, f):
    """``Zᵀ(w σ(Z f)) + r f + b`` (the gradient of φ in rotated coordinates; margins clipped)."""
    m = np.clip(np.matmul(Z, f[..., None])[..., 0], -MARGIN_CLIP, MARGIN_CLIP)
    return np.matmul((w * expit(m))[:, None, :], Z)[:, 0, :] + r[:, None] * f + b


def solve_centralised(X_list, y_list, *, C: float, reg_weight: float, tol: float = 1e-12) -> np.ndarray:
    """argmin_f Σ_i O(f, D_i) (pooled, exact Newton on the strongly convex sum)."""
    d = X_list[0].shape[1]
    Xs = [np.asarray(x, dtype=np.float64) for x in X_list]
    X = np.concatenate(Xs)[None]
    y = np.concatenate(y_list)[None]
    w = np.concatenate([np.full(x.shape[0], C / x.shape[0]) for x in Xs])[None]
    f, _, _ = local_newton(X, y, w, np.array([float(reg_weight)]), np.zeros((1, d)), np.zeros((1, d)),
                           tol=tol, max_iter=100)
    return f[0]
