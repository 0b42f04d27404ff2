"""The schedules of graph consensus [Zhang] and the conditions its theorems need: η_i(t), θ, α_i(t) tables,
[Zhang, Thm 3.1] (convergence), [Zhang, eq. 64] (privacy), the per-iteration ε terms of [Zhang, Thm 4.1] and the
noise rate α(1) that meets a budget (public inputs only).
"""

from __future__ import annotations

import warnings

import numpy as np

from ...exceptions import InvalidParameterError, PrivacyPreconditionError

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
