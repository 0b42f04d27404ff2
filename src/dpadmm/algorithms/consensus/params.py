"""The public parameters of an M-ADMM fit [Zhang], checked once, and the one place a budget ε becomes α.

:class:`MADMMParams` holds ``ConsensusLogisticRegression``'s M-ADMM parameters (its checks run when it is built);
:meth:`MADMMParams.tables` turns the η, θ, α schedules into (N, T) tables for N nodes. :func:`solve_alpha` is the
ε → α of penalty perturbation: α(1) such that P(T) [Zhang, Thm 4.1] plus the DP base-rate fallback's budget is the
operator's total ε (``dpadmm consensus madmm --perturbation pp --epsilon E``); nothing outside this folder solves it."""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..._validation import check_choice, check_int, check_positive
from ...exceptions import InvalidParameterError
from . import schedules as gc

DEFAULT_C = 50.0
DEFAULT_REG_WEIGHT = 1.0


def _check_schedule(name: str, value, allow_inf: bool = False):
    if value is None or callable(value):
        return value
    arr = np.asarray(value, dtype=np.float64) if not isinstance(value, numbers.Real) else None
    if arr is None:
        check_positive(name, value, allow_inf=allow_inf)
    elif arr.ndim != 1 or np.any(np.isnan(arr)) or np.any(arr <= 0) or (not allow_inf and np.any(np.isinf(arr))):
        raise InvalidParameterError(f"{name} must be a positive number, one positive value per node or a callable "
                                    f"(i, t) -> value, got {name}={value!r}.")
    return value


@dataclass(frozen=True)
class MADMMParams:
    """An M-ADMM fit's parameters (see :class:`dpadmm.estimators.ConsensusLogisticRegression`: ``C``,
    ``reg_weight``, the θ/η/α schedules, ``perturbation``, ``max_iter``, ``tol``, ``normalize``, ``batch``,
    ``record_path``, ``newton_tol``, ``fallback_epsilon``, ``monitor``)."""

    C: float = DEFAULT_C
    reg_weight: float = DEFAULT_REG_WEIGHT
    theta: Any = 0.5
    theta_growth: Any = 1.0
    eta: Any = None
    eta_growth: Any = 1.0
    perturbation: str = "none"
    alpha: Any = None
    alpha_growth: Any = 1.0
    max_iter: int = 100
    tol: float = 0.0
    normalize: bool = False
    batch: bool = True
    record_path: bool = False
    newton_tol: float = 1e-10
    fallback_epsilon: float | None = 0.5
    monitor: bool | None = None

    def __post_init__(self):
        check_positive("C", self.C)
        check_positive("reg_weight", self.reg_weight)
        check_int("max_iter", self.max_iter)
        check_positive("tol", self.tol, allow_zero=True)
        check_positive("newton_tol", self.newton_tol)
        check_choice("perturbation", self.perturbation, gc.PERTURBATIONS)
        if self.fallback_epsilon is not None:
            check_positive("fallback_epsilon", self.fallback_epsilon, allow_zero=True)
        _check_schedule("theta", self.theta)
        _check_schedule("eta", self.eta)
        _check_schedule("alpha", self.alpha, allow_inf=True)
        if self.perturbation == "none" and self.alpha is not None:
            raise InvalidParameterError(f"alpha is only used with a perturbation, got alpha={self.alpha!r} with "
                                        "perturbation='none'; choose pp, dvp or pvp.")
        if self.perturbation != "none" and self.alpha is None:
            raise InvalidParameterError(f"perturbation={self.perturbation!r} needs the noise parameter alpha > 0 "
                                        "(density ~ exp(-alpha ||eps||)), got alpha=None.")
        if self.perturbation == "dvp" and self.eta is not None:
            raise InvalidParameterError(f"dvp fixes eta_i(t) = theta (Zhang & Zhu 2017), got eta={self.eta!r}; "
                                        "use perturbation='pp' for a growing penalty.")

    @property
    def private(self) -> bool:
        return self.perturbation != "none"

    def tables(self, n_nodes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(η, θ, α) as (N, T) tables; α = ∞ (no noise) in a non-private run."""
        T = int(self.max_iter)
        theta = gc.schedule_table(self.theta, self.theta_growth, n_nodes=n_nodes, rounds=T, name="theta")
        eta = theta.copy() if self.eta is None else gc.schedule_table(self.eta, self.eta_growth, n_nodes=n_nodes,
                                                                       rounds=T, name="eta")
        if self.private:
            alpha = gc.schedule_table(self.alpha, self.alpha_growth, n_nodes=n_nodes, rounds=T, name="alpha")
        else:
            alpha = np.full((n_nodes, T), np.inf)
        return eta, theta, alpha


def solve_alpha(epsilon: float, *, fallback_epsilon: float | None, C: float, theta, theta_growth, eta, eta_growth,
                perturbation: str, alpha_growth, sizes, degree, rounds: int) -> float:
    """α(1) of penalty perturbation (``pp``/``dvp``) for a total per-node budget ``epsilon``: P(T) [Zhang, Thm 4.1]
    = ``epsilon`` − ``fallback_epsilon`` over the η schedule (θ's for ``dvp`` or without η), the node ``sizes`` and
    ``degree`` (public). Raises :class:`~dpadmm.exceptions.PrivacyPreconditionError` when the settings spend more
    without noise (the caller has checked ``epsilon`` > ``fallback_epsilon``)."""
    own = eta is None or perturbation == "dvp"
    eta_tab = gc.schedule_table(theta if own else eta, theta_growth if own else eta_growth, n_nodes=len(sizes),
                                rounds=int(rounds))
    if np.ndim(alpha_growth) or isinstance(alpha_growth, (list, tuple)):
        raise InvalidParameterError("--epsilon needs one --alpha-growth for every node.")
    return gc.alpha_for_budget(float(epsilon) - float(fallback_epsilon or 0.0), C=C, B=list(sizes), degree=degree,
                               eta=eta_tab, alpha_growth=float(alpha_growth))


__all__ = ["DEFAULT_C", "DEFAULT_REG_WEIGHT", "MADMMParams", "solve_alpha"]
