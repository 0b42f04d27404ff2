"""The public parameters of a functional quantile regression fit [Zhou], checked once.

:class:`FunctionalParams` holds ``FunctionalQuantileRegressor``'s parameters; its checks run when it is built
(:meth:`FunctionalParams.check_sizes` adds the two that need the data's size), so a bad value is refused with one
line naming it. The budget's shares, the comparison's margin and the constant-only threshold are public constants
of the protocol, here; the ε → noise calibration is :func:`.driver_stages.calibrate`'s."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..._validation import check_choice, check_int, check_open_unit, check_positive
from ...exceptions import InvalidParameterError, PrivacyPreconditionError
from ...privacy.accountants import ACCOUNTANTS
from . import rules as functional_rules

BASES = ("auto", "fpca", "private-fpca", "fourier", "bspline")
#: budget shares of the one-shot releases, as fractions of the L ADMM rounds (a total budget only): each
#: pooled statistic, the DP τ-quantile (all B bisection counts) and the model-vs-constant comparison
SHARES = {"statistic": 0.1, "quantile": 0.5, "compare": 0.25}
#: with a total budget the comparison's share grows to COMPARE_N_EPSILON/(n·ε) of the rounds (at most 1): the
#: comparison's noise per curve falls as 1/(n·ε), so on few curves a fixed quarter could not tell a good model from
#: the DP constant (issue 38: on 1,000 simulated curves at ε = 2 it threw away models at 0.92 and 1.09 against the
#: constant's 1.29; with the rounds' worth it kept them, at the cost of noisier rounds: 0.315 against 0.301 on
#: 5,000 curves at ε = 1, τ = 0.5, seed 0 — 0.335 against 0.312 over 3 seeds; from n·ε = 40,000 a quarter as before)
COMPARE_N_EPSILON = 10_000.0
COMPARE_MARGIN = 2.0
#: private fits with n·ε below this (public) skip the ADMM and spend the whole budget on the DP constant. 0 (the
#: default since issue 38): never — the comparison decides at every size (a model no better than the DP constant is
#: handed over with probability ≤ Φ(−COMPARE_MARGIN)); the n·ε < 2,500 rule it replaced threw away good models
MIN_N_EPSILON = 0.0
#: private predictions stay within BAND response scales b of the DP constant (and inside the range)
BAND = 3.0


@dataclass(frozen=True)
class FunctionalParams:
    """A functional fit's parameters (see :class:`dpadmm.estimators.FunctionalQuantileRegressor`)."""

    tau: float = 0.5
    n_components: int = 6
    basis: str = "auto"
    penalty: str = "l1"
    lam: float = 0.05
    l1_ratio: float = 0.5
    rho: float = 0.1
    method: str = "fast"
    max_iter: int | None = None
    fit_intercept: bool = True
    epsilon: float | None = None
    delta: float = 1e-5
    total_epsilon: float | None = None
    c1: float | None = None
    c_w: float = 1.0
    c2: float = 1.0
    eta0: float | None = None
    curve_clip: float | None = None
    y_range: Any = None
    workers: int = 4
    accountant: str = "pld"
    monitor: bool | None = None
    min_n_epsilon: float | None = None

    def __post_init__(self):
        check_open_unit("tau", self.tau)
        check_int("n_components", self.n_components)
        check_choice("basis", self.basis, BASES)
        check_choice("penalty", self.penalty, functional_rules.PENALTIES)
        check_positive("lam", self.lam, allow_zero=True)
        if self.penalty == "elasticnet":
            check_open_unit("l1_ratio", self.l1_ratio)
        check_positive("rho", self.rho)
        check_choice("method", self.method, tuple(functional_rules.METHODS))
        if self.max_iter is not None:
            check_int("max_iter", self.max_iter)
        check_int("workers", self.workers)
        if self.epsilon is not None and self.total_epsilon is not None:
            raise InvalidParameterError("give at most one of epsilon (per iteration) and total_epsilon; got both.")
        if self.epsilon is not None:
            check_positive("epsilon", self.epsilon)
        if self.total_epsilon is not None:
            check_positive("total_epsilon", self.total_epsilon)
        check_open_unit("delta", self.delta)
        for name in ("c1", "eta0", "curve_clip"):
            if getattr(self, name) is not None:
                check_positive(name, getattr(self, name))
        check_positive("c_w", self.c_w)
        check_positive("c2", self.c2, allow_zero=True)
        check_choice("accountant", self.accountant, ACCOUNTANTS)
        if self.min_n_epsilon is not None:
            check_positive("min_n_epsilon", self.min_n_epsilon, allow_zero=True)
        if self.private and self.basis == "fpca":
            raise PrivacyPreconditionError("basis='fpca' would release the pooled moment matrix of the curves in the "
                                           "clear; a private fit needs basis='auto'/'private-fpca' (noised and "
                                           "accounted) or 'fourier'/'bspline'.")
        if self.y_range is not None:
            try:
                lo, hi = (float(v) for v in self.y_range)
            except (TypeError, ValueError):
                raise InvalidParameterError(f"y_range must be a pair (lo, hi), got y_range={self.y_range!r}.") from None
            if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
                raise InvalidParameterError(f"y_range must be finite with lo < hi, got y_range={self.y_range!r}.")

    def check_sizes(self, n: int, T: int) -> None:
        """The checks that need the data: K ≤ the grid's T points, M ≤ the n curves."""
        if self.n_components > T:
            raise InvalidParameterError(f"n_components must be at most the number of grid points ({T}), "
                                        f"got n_components={self.n_components}.")
        if self.workers > n:
            raise InvalidParameterError(f"workers must be at most the curves (n_samples = {n}), got workers={self.workers}.")

    @property
    def private(self) -> bool:
        return self.epsilon is not None or self.total_epsilon is not None

    @property
    def basis_kind(self) -> str:
        """``auto`` resolved: ``bspline`` in a private fit, ``fpca`` otherwise."""
        if self.basis == "auto":
            return "bspline" if self.private else "fpca"
        return self.basis

    @property
    def n_epsilon_floor(self) -> float:
        """n·ε below which a total budget goes to the DP constant alone (``min_n_epsilon``, default MIN_N_EPSILON)."""
        return float(MIN_N_EPSILON if self.min_n_epsilon is None else self.min_n_epsilon)

    def constant_only(self, n: int) -> bool:
        return bool(self.private and self.total_epsilon is not None and n * float(self.total_epsilon)
                    < self.n_epsilon_floor)

    def shares(self, L: int, n: int | None = None) -> tuple[int, int, int]:
        """(W_s, W_q, W_c): the budget share of each one-shot release, in ADMM rounds (1 with a per-iteration ε); with
        the public number of curves ``n``, the comparison's share is COMPARE_N_EPSILON/(n·ε) kept in [SHARES, 1]."""
        if self.total_epsilon is None:
            return 1, 1, 1
        share = dict(SHARES)
        if n is not None:
            share["compare"] = min(1.0, max(SHARES["compare"], COMPARE_N_EPSILON / (n * float(self.total_epsilon))))
        return tuple(max(1, int(round(L * share[k]))) for k in ("statistic", "quantile", "compare"))


__all__ = ["BAND", "BASES", "COMPARE_MARGIN", "COMPARE_N_EPSILON", "FunctionalParams", "MIN_N_EPSILON", "SHARES"]
