"""End-to-end audit statistics: from what an adversary saw in many whole runs on D and on D' to an
ε lower bound.

Input: two arrays of *views* ``V0`` (runs on D) and ``V1`` (runs on D'), one row per independent
run of the whole fit, holding everything the adversary of the threat model sees (every message a
party sent in every round, anything pooled), flattened. The runs are split three ways:

1. the first ``fit_fraction`` of each side estimates the statistics' parameters (means, variances);
2. of the rest, the first half (the pilot) chooses the statistic, threshold and orientation that
   would give the largest bound;
3. the other half evaluates that single test: Clopper–Pearson upper bounds on its false-positive and
   false-negative rates at α/2 each give ``ε ≥ ln((1 − δ − FPR⁺)/FNR⁺)`` (see :mod:`.audit`).

Because each choice is made on runs the evaluation never sees, the bound holds with probability at
least ``1 − α`` whatever statistics are offered.

Statistics (each a function of one view):

- ``mean-difference``: projection on ``μ̂₁ − μ̂₀`` (the Neyman–Pearson test for a mean shift under
  isotropic noise);
- ``gaussian-lr``: the log-likelihood ratio of two Gaussians with the estimated means and a pooled
  diagonal covariance (weights coordinates by their noise: rounds with different σ, noise pushed
  through the iteration);
- ``gaussian-lr-hetero``: the same with a separate diagonal covariance per side (catches a change of
  spread, not only of location);
- ``gaussian-lr-full``: the linear discriminant with a pooled *full* covariance (ridge-shrunk), for
  views small enough to estimate it: noise that the iteration carries from round to round is
  correlated, and this test takes it out (only when the view has at most ``n_fit/3`` coordinates);
- statistics computed by the caller (``extra0``/``extra1``), e.g. a *model-based* likelihood ratio:
  an adversary who knows D and D' except the differing record and the code replays each party's
  step on the messages it saw and scores the release against both predictions;
- every statistic also on each named *block* of the view (e.g. the released models alone, the pooled
  basis alone), written ``<block>/<statistic>``: a weak signal is not drowned by noisy coordinates
  that carry none;
- ``subspace:<name>``: the squared distance of the released vectors from a data-dependent subspace
  (e.g. range(D_m) of D). A mechanism whose noise lives in a data-dependent subspace — [Hu, eq. 16] —
  has outputs at distance ~0 under one dataset and not under the other: disjoint supports.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .audit import best_epsilon_lower_bound


@dataclass(frozen=True)
class Subspace:
    """A data-dependent subspace to measure released vectors against.

    ``columns`` (k, N) indexes k released N-vectors inside a view; ``basis`` (N, r) is orthonormal.
    The statistic is ``Σ_j ‖v_j − U Uᵀ v_j‖²`` over the k vectors.
    """

    name: str
    columns: np.ndarray
    basis: np.ndarray

    def distance2(self, V: np.ndarray) -> np.ndarray:
        blocks = V[:, self.columns]  # (n, k, N)
        proj = (blocks @ self.basis) @ self.basis.T
        return np.sum((blocks - proj) ** 2, axis=(1, 2))


def _diag_gaussian_loglik(V: np.ndarray, mu: np.ndarray, var: np.ndarray) -> np.ndarray:
    return -0.5 * np.sum((V - mu) ** 2 / var + np.log(var), axis=1)


def statistics(F0: np.ndarray, F1: np.ndarray, subspaces: tuple[Subspace, ...] = (),
               blocks: dict[str, slice] | None = None) -> dict:
    """Statistic functions ``name -> f(V) -> (n,) scores`` estimated on the fitting runs F0, F1,
    on the whole view and on each block of ``blocks`` (name → column slice)."""
    out = _block_statistics(F0, F1)
    for bname, sl in (blocks or {}).items():
        if len(blocks) > 1 and sl.stop - sl.start > 0:
            for k, f in _block_statistics(F0[:, sl], F1[:, sl]).items():
                out[f"{bname}/{k}"] = (lambda V, _f=f, _sl=sl: _f(V[:, _sl]))
    for s in subspaces:
        out[f"subspace:{s.name}"] = s.distance2
    return out


def _block_statistics(F0: np.ndarray, F1: np.ndarray) -> dict:
    mu0, mu1 = F0.mean(axis=0), F1.mean(axis=0)
    diff = mu1 - mu0
    v0, v1 = F0.var(axis=0), F1.var(axis=0)
    scale = max(float(np.mean(0.5 * (v0 + v1))), 1e-300)
    floor = 1e-9 * scale + 1e-300  # coordinates the noise does not reach: keep the ratio finite
    pooled = 0.5 * (v0 + v1) + floor
    mid = 0.5 * (mu0 + mu1)
    w = diff / pooled
    out = {
        "mean-difference": lambda V: V @ diff,
        "gaussian-lr": lambda V: (V - mid) @ w,
        "gaussian-lr-hetero": lambda V: _diag_gaussian_loglik(V, mu1, v1 + floor) - _diag_gaussian_loglik(V, mu0, v0 + floor),
    }
    p, n = F0.shape[1], min(len(F0), len(F1))
    if 0 < p <= n // 3:
        C = 0.5 * (np.cov(F0, rowvar=False).reshape(p, p) + np.cov(F1, rowvar=False).reshape(p, p))
        C = C + (1e-6 * np.trace(C) / p + floor) * np.eye(p)
        w_full = np.linalg.solve(C, diff)
        out["gaussian-lr-full"] = lambda V: (V - mid) @ w_full
    return out


def audit_views(V0: np.ndarray, V1: np.ndarray, *, delta: float, alpha: float = 0.05,
                subspaces: tuple[Subspace, ...] = (), blocks: dict[str, slice] | None = None,
                extra0: dict | None = None, extra1: dict | None = None, fit_fraction: float = 0.25) -> dict:
    """ε lower bound (confidence ``1 − alpha``) from views of whole runs on D (``V0``) and D' (``V1``).

    ``extra0`` / ``extra1`` add precomputed statistics (name → one score per run, in run order), e.g.
    a model-based likelihood ratio that needs no fitting; they take part in the same selection.
    Returns the bound, the chosen statistic, every statistic's pilot bound and the error counts.
    """
    V0, V1 = np.asarray(V0, dtype=np.float64), np.asarray(V1, dtype=np.float64)
    f0, f1 = int(len(V0) * fit_fraction), int(len(V1) * fit_fraction)
    stats = statistics(V0[:f0], V1[:f1], subspaces, blocks)
    E0, E1 = V0[f0:], V1[f1:]
    s0 = {k: f(E0) for k, f in stats.items()}
    s1 = {k: f(E1) for k, f in stats.items()}
    for k in (extra0 or {}):
        s0[k] = np.asarray(extra0[k], dtype=np.float64)[f0:]
        s1[k] = np.asarray(extra1[k], dtype=np.float64)[f1:]
    res = best_epsilon_lower_bound(s0, s1, delta, alpha=alpha)
    res["n_fit"] = [f0, f1]
    res["view_dim"] = int(V0.shape[1])
    return res
