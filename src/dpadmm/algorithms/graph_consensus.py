"""Decentralised consensus M-ADMM over a graph with penalty perturbation — [Zhang, eq. 10–11, 24–25, Alg. 1].

Problem [Zhang, eq. 1–2]: ``min Σ_i O(f_i, D_i)`` s.t. ``f_i = f_j`` on every edge, with
``O(f, D_i) = (C/B_i) Σ_n ℒ(y_i^n fᵀx_i^n) + (ρ/N) R(f)``, ℒ logistic, ``R = ½‖f‖²``.

Iteration t → t+1 at node i (``V_i`` = degree, ``S_i(t) = Σ_{j∈V_i} f_j(t)``):

- dual   [Zhang, eq. 11]: ``λ_i(t) = λ_i(t−1) + (θ/2) Σ_j (f_i(t) − f_j(t)) = λ_i(t−1) + (θ/2)(V_i f_i(t) − S_i(t))``
- primal [Zhang, eq. 10, 24–25]:
  ``f_i(t+1) = argmin_f O(f, D_i) + 2λ_i(t)ᵀf + η_i(t+1) Σ_j ‖f + ε_i(t+1) − ½(f_i(t) + f_j(t))‖²``
  ``        = argmin_f O(f, D_i) + bᵀf + η V_i ‖f‖²`` with ``b = 2λ_i(t) − η m + 2ηV_i ε``,
  ``m = V_i f_i(t) + S_i(t)`` — a smooth, strongly convex problem in d variables, solved by damped
  majorisation–minimisation steps with warm start (:func:`local_solve`), for a whole stack of nodes at
  once, each node stopping on its own; the curvature bound is eigendecomposed once and reused as η changes.
- perturbation: ``pp`` draws ε with density ∝ exp(−α_i(t+1)‖ε‖) ([Zhang, eq. 24]: norm ~ Gamma(d, 1/α),
  uniform direction); ``dvp`` is the same with η_i(t) ≡ θ (Zhang & Zhu 2017); ``pvp`` adds the same
  noise to f_i(t+1) *after* the update, before it is broadcast (primal variable perturbation);
  ``none`` is M-ADMM. Conventional ADMM is ``none`` with η_i(t) ≡ θ.
- privacy [Zhang, Thm 4.1]: for pp/dvp, node i emits, per iteration, the pure-DP term
  ``C(1.4c_1 + α_i(t))/(η_i(t) V_i B_i)`` (a :class:`PureDPRelease`); :mod:`dpadmm.privacy.zhang`
  sums and maximises them into P(t).

The step is written once for a *block* of K nodes held as stacked, zero-padded arrays
(``X``: K × B_max × d); a deployment runs one block per node (K = 1), the in-process fast path
one block holding every node. The neighbour exchange is the hub's job (``router_*``): it
collects every f_i(t+1) and hands node i ``S_i(t+1)`` — exactly what node i's neighbours send it.
f_i(0) = 0 for every node (data-independent, as [Zhang, Alg. 1] requires of the random start).

| symbol | code |
|--------|------|
| f_i(t) | ``BlockState.f[k]`` / ``ModelMessage.f`` |
| λ_i(t) | ``BlockState.lam[k]`` |
| S_i(t) = Σ_{j∈V_i} f_j(t) | ``NeighbourMessage.neighbour_sum`` |
| η_i(t), θ_i(t), α_i(t) | ``BlockConfig.eta[k, t−1]``, ``.theta[k, t−1]``, ``.alpha[k, t−1]`` |
| C, ρ/N | ``BlockConfig.C``, ``BlockConfig.reg`` (ρ is ``reg_weight`` in the estimator/CLI) |
| B_i, V_i | ``BlockConfig.B``, ``BlockConfig.degree`` |
| c_1 | ``LOGISTIC_C1`` = 1/4 |
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np
from scipy.special import expit

from ..exceptions import InvalidParameterError, PrivacyPreconditionError
from ..privacy.events import RECORD_REPLACE, PureDPRelease

LOGISTIC_C1 = 0.25  # sup ℒ'' of the logistic loss [Zhang, §5]
PERTURBATIONS = ("none", "pp", "dvp", "pvp")


class ConvergenceConditionWarning(UserWarning):
    """η_i(t) ≥ θ and non-decreasing ([Zhang, Thm 3.1]) do not hold: convergence is not guaranteed."""


# ----------------------------------------------------------------------------- schedules
def schedule_table(start, growth=1.0, *, n_nodes: int, rounds: int, name: str = "eta") -> np.ndarray:
    """(N, T) table of a per-node, per-iteration parameter; column t−1 holds the value at iteration t.

    ``start``: scalar, per-node sequence, or callable ``start(i, t) -> float`` (i = 0…N−1, t = 1…T);
    ``growth``: scalar or per-node q_i of the geometric schedule ``start_i · q_i^{t−1}`` (ignored
    for callables). Values must be positive (``inf`` allowed for α: no noise).
    """
    t = np.arange(rounds, dtype=np.float64)
    if callable(start):
        table = np.array([[float(start(i, s + 1)) for s in range(rounds)] for i in range(n_nodes)])
    else:
        s0 = np.broadcast_to(np.asarray(start, dtype=np.float64), (n_nodes,)) if np.ndim(start) == 0 \
            else np.asarray(start, dtype=np.float64)
        q = np.asarray(growth, dtype=np.float64)
        if s0.shape != (n_nodes,):
            raise InvalidParameterError(f"{name} must be a scalar or one value per node ({n_nodes}), "
                                        f"got {s0.shape[0]} values.")
        if q.ndim and q.shape != (n_nodes,):
            raise InvalidParameterError(f"{name}_growth must be a scalar or one value per node ({n_nodes}), "
                                        f"got {q.shape[0]} values.")
        if np.any(~np.isfinite(q)) or np.any(q <= 0):
            raise InvalidParameterError(f"{name}_growth must be positive and finite, got {name}_growth={growth!r}.")
        with np.errstate(over="ignore", invalid="ignore"):
            table = s0[:, None] * np.power(np.broadcast_to(q, (n_nodes,))[:, None], t[None, :])
        table = np.where(np.isinf(s0)[:, None], np.inf, table)
    if np.any(np.isnan(table)) or np.any(table <= 0):
        raise InvalidParameterError(f"{name} must be positive at every node and iteration, got a value "
                                    f"{table[np.isnan(table) | (table <= 0)][0]!r}.")
    if name != "alpha" and np.any(np.isinf(table)):
        raise InvalidParameterError(f"{name} must be finite, got an infinite value.")
    return table


def check_convergence_condition(eta: np.ndarray, theta: np.ndarray) -> list[str]:
    """Warn (:class:`ConvergenceConditionWarning`) unless ``η_i(t+1) ≥ η_i(t) ≥ θ`` [Zhang, Thm 3.1]."""
    problems = []
    if np.any(eta < theta - 1e-12):
        i, t = np.argwhere(eta < theta - 1e-12)[0]
        problems.append(f"eta_{i}({t + 1})={eta[i, t]:.4g} < theta={theta[i, t]:.4g}")
    if eta.shape[1] > 1 and np.any(np.diff(eta, axis=1) < -1e-12):
        i, t = np.argwhere(np.diff(eta, axis=1) < -1e-12)[0]
        problems.append(f"eta_{i} decreases at iteration {t + 2}")
    for p in problems:
        warnings.warn(f"M-ADMM convergence condition eta_i(t+1) >= eta_i(t) >= theta violated: {p} "
                      "[Zhang, Thm 3.1].", ConvergenceConditionWarning, stacklevel=3)
    return problems


def check_privacy_condition(*, B, degree, C: float, reg: float, theta: np.ndarray, eta: np.ndarray,
                            c1: float = LOGISTIC_C1) -> None:
    """Raise :class:`PrivacyPreconditionError` unless [Zhang, Alg. 1]'s
    ``2c_1 < (B_i/C)(ρ/N + 2θV_i)`` holds for every node (θ = min_t θ_i(t)), and the per-iteration
    condition it serves, ``c_1 / ((B_i/C)(ρ/N + 2η_i(t)V_i)) < ½`` [Zhang, eq. 64], for all i, t."""
    B = np.asarray(B, dtype=np.float64)
    V = np.asarray(degree, dtype=np.float64)
    lhs = (B / C) * (reg + 2.0 * theta.min(axis=1) * V)
    bad = np.flatnonzero(~(2.0 * c1 < lhs))
    if bad.size:
        i = bad[0]
        raise PrivacyPreconditionError(
            f"theta violates [Zhang, Alg. 1] at node {i}: 2c1={2 * c1:g} must be < (B_i/C)(rho/N + 2 theta V_i)="
            f"{lhs[i]:.4g} (B_i={int(B[i])}, V_i={int(V[i])}, C={C:g}); increase theta or decrease C.")
    ratio = c1 / ((B / C)[:, None] * (reg + 2.0 * eta * V[:, None]))
    if np.any(ratio >= 0.5):
        i, t = np.argwhere(ratio >= 0.5)[0]
        raise PrivacyPreconditionError(
            f"eta_{i}({t + 1})={eta[i, t]:.4g} violates [Zhang, eq. 64]: c1/((B_i/C)(rho/N + 2 eta V_i))="
            f"{ratio[i, t]:.4g} must be < 0.5; keep eta_i(t) >= theta.")


def zhang_epsilon_terms(*, C: float, B, degree, eta, alpha, c1: float = LOGISTIC_C1) -> np.ndarray:
    """Per-iteration terms ``C(1.4c_1 + α_i(t)) / (η_i(t) V_i B_i)`` of [Zhang, Thm 4.1] (broadcasts)."""
    B = np.asarray(B, dtype=np.float64)
    V = np.asarray(degree, dtype=np.float64)
    return C * (1.4 * c1 + np.asarray(alpha)) / (np.asarray(eta) * V * B)


def alpha_for_budget(target: float, *, C: float, B, degree, eta: np.ndarray, alpha_growth: float = 1.0,
                     c1: float = LOGISTIC_C1) -> float:
    """α(1) of the schedule α_i(t) = α(1)·q^{t−1} for which P(T) = max_i Σ_t C(1.4c_1 + α_i(t))/(η_i(t)V_iB_i)
    [Zhang, Thm 4.1] equals ``target`` (P is affine in α(1); public inputs only). Raises
    :class:`PrivacyPreconditionError` when even α → 0 spends more than ``target``."""
    B = np.asarray(B, dtype=np.float64)[:, None]
    V = np.asarray(degree, dtype=np.float64)[:, None]
    q = float(alpha_growth) ** np.arange(eta.shape[1], dtype=np.float64)[None, :]
    base = (C * 1.4 * c1 / (eta * V * B)).sum(axis=1)
    slope = (C * q / (eta * V * B)).sum(axis=1)
    a = float(np.min((float(target) - base) / slope))
    if not a > 0:
        raise PrivacyPreconditionError(
            f"a budget of {target:g} is below what these settings spend without noise ({float(base.max()):.4g}: "
            "C, the eta schedule, the node sizes and degrees); raise the budget, lower --C or grow --eta faster.")
    return a


# ----------------------------------------------------------------------------- the local solver
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


# ----------------------------------------------------------------------------- messages
class NeighbourMessage(NamedTuple):
    """Router → block: for every node k of the block, ``S_k(t) = Σ_{j∈V_k} f_j(t)`` (what its neighbours broadcast)."""

    round: int
    neighbour_sum: np.ndarray  # (K, d)


class ModelMessage(NamedTuple):
    """Block → router: every node's broadcast f_k(t+1) (noisy under PVP). Nothing else leaves a node."""

    f: np.ndarray  # (K, d)


# ----------------------------------------------------------------------------- node block
@dataclass(frozen=True, eq=False)
class BlockConfig:
    """Everything a block of K nodes holds. X, y and the penalty schedule η never leave the nodes."""

    names: tuple[str, ...]
    X: np.ndarray  # (K, B_max, d) zero-padded
    y: np.ndarray  # (K, B_max), 0 on padding
    w: np.ndarray  # (K, B_max): C/B_k on real rows, 0 on padding
    B: np.ndarray  # (K,)
    degree: np.ndarray  # (K,)
    C: float
    reg: float  # ρ/N
    eta: np.ndarray  # (K, T)
    theta: np.ndarray  # (K, T)
    alpha: np.ndarray  # (K, T); inf = no noise
    perturbation: str = "none"
    c1: float = LOGISTIC_C1
    newton_tol: float = 1e-10
    newton_max_iter: int = 500
    bound: Curvature | None = None  # eigendecomposed curvature bound c1 Σ w x xᵀ, computed once at setup
    Z: np.ndarray | None = None  # (K, B_max, d) rotated_data(X, y, bound): the solver's copy of the data


class BlockState(NamedTuple):
    round: int
    f: np.ndarray  # (K, d): f_k(t) as broadcast
    lam: np.ndarray  # (K, d): λ_k(t−1)
    newton_iterations: int = 0  # Σ over rounds of the most local iterations any node of the block needed


def make_block(names, X_list, y_list, *, degree, C, reg, eta, theta, alpha, perturbation="none",
               newton_tol=1e-10, newton_max_iter=500) -> tuple[BlockConfig, BlockState]:
    """Stack the nodes' data into padded arrays and factor each node's curvature bound once;
    f(0) = 0, λ(0) = 0 [Zhang, Alg. 1]."""
    B = np.array([x.shape[0] for x in X_list], dtype=np.float64)
    X = _pad([np.asarray(x, dtype=np.float64) for x in X_list])
    y = _pad([np.asarray(v, dtype=np.float64) for v in y_list])
    mask = _pad([np.ones(x.shape[0]) for x in X_list])
    w = mask * (float(C) / B)[:, None]
    bound = curvature_factor(X, w)
    cfg = BlockConfig(tuple(names), X, y, w, B, np.asarray(degree, dtype=np.float64), float(C), float(reg),
                      np.asarray(eta, dtype=np.float64), np.asarray(theta, dtype=np.float64),
                      np.asarray(alpha, dtype=np.float64), perturbation, LOGISTIC_C1, float(newton_tol),
                      int(newton_max_iter), bound, rotated_data(X, y, bound))
    K, d = X.shape[0], X.shape[2]
    return cfg, BlockState(0, np.zeros((K, d)), np.zeros((K, d)))


def setup_block(names, X_list, y_list, options: Mapping[str, Any]):
    """Worker-side setup (``PartySpec.setup``)."""
    return make_block(names, X_list, y_list, **options)


def _noise(rng, alpha: np.ndarray, d: int) -> np.ndarray:
    """ε_k with density ∝ exp(−α_k‖ε‖) for every node k [Zhang, eq. 24] (0 where α_k = ∞).

    ``rng``: the block's generator (party-local entropy), or in a seeded simulation one generator per
    node of the block (``PartySpec.streams``), node k drawing from its own stream exactly as a party
    of its own would — so a stacked block and one party per node give the same numbers."""
    from ..privacy.mechanisms import gamma_norm

    finite = np.isfinite(alpha)
    out = np.zeros((alpha.shape[0], d))
    if isinstance(rng, tuple):
        for k in np.flatnonzero(finite):
            out[k] = gamma_norm(rng[k], alpha[k:k + 1], d, size=1)[0]
        return out
    if finite.any():
        out[finite] = gamma_norm(rng, alpha[finite], d, size=int(finite.sum()))
    return out


def block_step(cfg: BlockConfig, state: BlockState, inbox: NeighbourMessage, *, rng: np.random.Generator):
    """One M-ADMM iteration t → t+1 for every node of the block: dual [eq. 11], then perturbed primal [eq. 24–25]."""
    t = inbox.round
    S = inbox.neighbour_sum
    V = cfg.degree
    f, lam = state.f, state.lam
    if t > 0:
        lam = lam + 0.5 * cfg.theta[:, t - 1, None] * (V[:, None] * f - S)  # [Zhang, eq. 11]
    eta = cfg.eta[:, t]  # η_k(t+1)
    alpha = cfg.alpha[:, t]
    d = f.shape[1]
    b = 2.0 * lam - eta[:, None] * (V[:, None] * f + S)  # [Zhang, eq. 10] expanded
    eps = None
    if cfg.perturbation in ("pp", "dvp"):
        eps = _noise(rng, alpha, d)
        b = b + 2.0 * (eta * V)[:, None] * eps  # [Zhang, eq. 24]: λ + η V ε in the linear term
    f_opt, its = local_solve(cfg.Z, cfg.w, cfg.reg + 2.0 * eta * V, b, f, cfg.bound,
                             tol=cfg.newton_tol, max_iter=cfg.newton_max_iter)  # [Zhang, eq. 25]
    f_new = f_opt
    if cfg.perturbation == "pvp":
        f_new = f_new + _noise(rng, alpha, d)  # primal variable perturbation before broadcast
    events = []
    if cfg.perturbation in ("pp", "dvp"):
        terms = zhang_epsilon_terms(C=cfg.C, B=cfg.B, degree=V, eta=eta, alpha=alpha, c1=cfg.c1)  # [Zhang, Thm 4.1]
        events = [PureDPRelease(name, t + 1, float(e), RECORD_REPLACE) for name, e in zip(cfg.names, terms)]
    new = BlockState(t + 1, f_new, lam, state.newton_iterations + int(its.max(initial=0)))
    return new, ModelMessage(f_new), events


def block_diagnostics(cfg: BlockConfig, state: BlockState) -> dict:
    """Monitoring values (not messages): per-node mean training loss, local objective O(f_k, D_k), accuracy."""
    z = np.matmul(cfg.X, state.f[..., None])[..., 0]
    mask = cfg.w > 0
    losses = np.where(mask, np.logaddexp(0.0, np.clip(-cfg.y * z, -MARGIN_CLIP, None)), 0.0)
    mean_loss = losses.sum(axis=1) / cfg.B
    correct = np.where(mask, (np.where(z >= 0, 1.0, -1.0) == cfg.y), False).sum(axis=1)
    return {
        "node_loss": mean_loss,
        "node_objective": cfg.C * mean_loss + 0.5 * cfg.reg * (state.f ** 2).sum(axis=1),
        "node_correct": correct,
        "node_samples": cfg.B,
        "newton_iterations": state.newton_iterations,
    }


def block_coefs(cfg: BlockConfig, state: BlockState) -> np.ndarray:
    """The block's current local models f_k (K, d)."""
    return state.f.copy()


# ----------------------------------------------------------------------------- router (hub)
@dataclass(frozen=True, eq=False)
class RouterConfig:
    """The network: adjacency A (CSR, N × N) and which block holds which nodes (global indices)."""

    A: Any
    blocks: tuple[tuple[str, np.ndarray], ...]
    n_nodes: int
    dim: int
    tol: float = 0.0
    record_path: bool = False


class RouterState(NamedTuple):
    round: int
    F: np.ndarray  # (N, d) latest broadcasts
    change: float
    path: tuple = ()  # F(1), F(2), … when record_path (an eavesdropper's view)


def init_router(cfg: RouterConfig):
    """f(0) = 0 everywhere, so every S_i(0) = 0."""
    F = np.zeros((cfg.n_nodes, cfg.dim))
    inboxes = {name: NeighbourMessage(0, np.zeros((idx.size, cfg.dim))) for name, idx in cfg.blocks}
    return RouterState(0, F, np.inf), inboxes


def router_step(cfg: RouterConfig, state: RouterState, outboxes: Mapping[str, ModelMessage], *, rng):
    """Deliver every broadcast f_j(t+1) to j's neighbours: node i receives ``S_i = Σ_{j∈V_i} f_j``."""
    F = np.empty_like(state.F)
    for name, idx in cfg.blocks:
        F[idx] = outboxes[name].f
    S = cfg.A @ F
    t = state.round + 1
    change = float(np.max(np.linalg.norm(F - state.F, axis=1)))
    path = state.path + (F,) if cfg.record_path else ()
    inboxes = {name: NeighbourMessage(t, S[idx]) for name, idx in cfg.blocks}
    return RouterState(t, F, change, path), inboxes, []


def router_metrics(cfg: RouterConfig, state: RouterState, diagnostics: Mapping[str, dict]) -> dict:
    """L(t) = (1/N) Σ_i (1/B_i) Σ_n ℒ(y f_i(t)ᵀx) [Zhang, §5], the objective Σ_i O(f_i, D_i), consensus error."""
    loss = np.concatenate([diagnostics[name]["node_loss"] for name, _ in cfg.blocks])
    obj = np.concatenate([diagnostics[name]["node_objective"] for name, _ in cfg.blocks])
    correct = sum(float(diagnostics[name]["node_correct"].sum()) for name, _ in cfg.blocks)
    total = sum(float(diagnostics[name]["node_samples"].sum()) for name, _ in cfg.blocks)
    fbar = state.F.mean(axis=0)
    consensus = float(np.max(np.linalg.norm(state.F - fbar, axis=1)))
    return {
        "train_loss": float(loss.mean()),
        "objective": float(obj.sum()),
        "train_accuracy": correct / total,
        "consensus_error": consensus,
        "change": state.change,
        "newton_iterations": int(sum(diagnostics[name]["newton_iterations"] for name, _ in cfg.blocks)),
        "converged": bool(cfg.tol > 0 and state.change <= cfg.tol and consensus <= cfg.tol),
    }


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



# ----------------------------------------------------------------------------- protocol (as data, for the network)
def load_node_data(path, params: Mapping[str, Any]):
    """Party side of a ``PartyData`` reference: node data from the node's own CSV (label column
    ``label_column`` in {-1, +1} or {0, 1}; every other column but ``id_column`` a feature).
    ``params["part"]``: ``"X"`` (rows rescaled to norm ≤ 1 if ``normalize``) or ``"y"`` (±1)."""
    import pandas as pd

    df = pd.read_csv(path)
    label, idc = str(params.get("label_column", "y")), str(params.get("id_column", "id"))
    if label not in df.columns:
        raise InvalidParameterError(f"node file {path} has no label column {label!r}.")
    if params.get("part") == "y":
        y = df[label].to_numpy(dtype=np.float64)
        return np.where(y > 0, 1.0, -1.0)
    X = df.drop(columns=[c for c in (label, idc) if c in df.columns]).to_numpy(dtype=np.float64)
    if params.get("normalize"):
        X = X / np.maximum(np.linalg.norm(X, axis=1), 1.0)[:, None]
    if params.get("require_unit_norm") and np.max(np.linalg.norm(X, axis=1)) > 1.0 + 1e-9:
        raise PrivacyPreconditionError(f"[Zhang, Thm 4.1] needs ||x||_2 <= 1 for every row of {path}; normalise them.")
    return X


def describe_node_data(path, id_column: str = "id", label_column: str = "y") -> dict:
    import pandas as pd

    df = pd.read_csv(path, usecols=lambda c: c != id_column)
    return {"rows": int(df.shape[0]), "columns": int(df.shape[1] - (label_column in df.columns))}


def _is_private(cfg: BlockConfig) -> bool:
    return cfg.perturbation != "none"


def peer_inbox(cfg: BlockConfig, state: BlockState, round_: int, neighbour_sum) -> NeighbourMessage:
    """Peer to peer (one node per party): round ``round_``'s inbox from the sum of the neighbours' broadcasts
    (``None`` in round 0, when every f_j(0) = 0)."""
    S = np.zeros_like(state.f) if neighbour_sum is None else np.asarray(neighbour_sum, dtype=np.float64)[None, :]
    return NeighbourMessage(round_, S)


def peer_broadcast(outbox: ModelMessage) -> np.ndarray:
    """Peer to peer: the node's broadcast f_i(t+1), sent to each of its neighbours."""
    return np.asarray(outbox.f)[0]


def _protocol():
    from ..protocol import Protocol
    from .policies import CONSENSUS

    return Protocol("graph-consensus", setup_block, block_step, block_diagnostics, handlers={},
                    types=(NeighbourMessage, ModelMessage, BlockState), load=load_node_data,
                    describe=describe_node_data, model=block_coefs, private=_is_private, data_args=(1, 2),
                    policy=CONSENSUS, peer_to_peer=(peer_inbox, peer_broadcast))


PROTOCOL = _protocol()
