"""The typed parameters of one vertical ADMM sharing fit [Hu, Alg. 1] and their checks (issue 39, item 1).

:class:`VerticalParams` holds the public parameters of :class:`dpadmm.estimators.VerticalLogisticRegression` and
:class:`~dpadmm.estimators.VerticalLinearRegression` (their docstrings say what each means), frozen; building one checks
every value once (a bad one raises :class:`~dpadmm.exceptions.InvalidParameterError` or
:class:`~dpadmm.exceptions.PrivacyPreconditionError` naming it and the fix). Its methods say which protocol a fit runs
and with which defaults: which side is private and by which mechanism, ρ, T, λ of the joint run, the clip of the
gaussian feature mechanism and the projection radii of [Hu, Assumption 2.1]. The driver (:mod:`.driver`) turns the
budgets into noise.
"""

from __future__ import annotations

import math
import dataclasses
from dataclasses import dataclass
from typing import Any

from ..._validation import check_choice, check_int, check_open_unit, check_positive
from ...exceptions import InvalidParameterError, PrivacyPreconditionError
from ...kernels.linalg import SOLVERS
from ...privacy.accountants import ACCOUNTANTS
from . import label as vl
from . import messages as vs

#: the losses of the vertical estimators (the classifier's ``logistic``, the regressor's ``squared`` and ``huber``,
#: the count regressor's ``poisson``)
LOSSES = ("logistic", "squared", "huber", "poisson")
#: the feature side's budget parameters: at most one is given
FEATURE_BUDGETS = ("epsilon", "iteration_epsilon", "noise_scale")


@dataclass(frozen=True)
class VerticalParams:
    """One vertical fit's parameters, checked when built (see the module docstring)."""

    loss: str = "logistic"
    lam: float = 1e-3
    rho: Any = "auto"
    max_iter: Any = "auto"
    tol: float | None = 2e-3
    fit_intercept: bool = True
    penalty: str = "l2"
    l1_ratio: float = 0.5
    adaptive_rho: bool = False
    damping: Any = "auto"
    epsilon: float | None = None
    delta: float = 1e-5
    iteration_epsilon: float | None = None
    noise_scale: float | None = None
    mechanism: str = "gaussian"
    relation: str = "feature_column"
    clip: Any = "auto"
    label_epsilon: float | None = None
    label_noise_scale: float | None = None
    label_mechanism: str = "rr"
    fallback: bool = True
    label_block_scale: float = 1.0
    bound: Any = "auto"
    accountant: str = "pld"
    random_state: Any = None
    monitor: bool | None = None
    solver: str = "auto"

    @classmethod
    def of(cls, values, **overrides) -> "VerticalParams":
        """The checked record of those of ``values`` (e.g. an estimator's ``get_params()``) that are its fields, with
        ``overrides`` (e.g. the estimator's ``loss``); other keys (``backend``, ``party_sizes``) are not parameters."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**dict({k: v for k, v in values.items() if k in names}, **overrides))

    def __post_init__(self):
        self._validate()

    # ------------------------------------------------------------------ which protocol
    @property
    def mode(self) -> str | None:
        """Which feature-side budget was given (``epsilon``, ``iteration_epsilon``, ``noise_scale``), or None."""
        given = [k for k in FEATURE_BUDGETS if getattr(self, k) is not None]
        if len(given) > 1:
            raise InvalidParameterError(f"give at most one of epsilon, iteration_epsilon, noise_scale; got {given}.")
        return given[0] if given else None

    @property
    def label_mode(self) -> bool:
        if self.label_epsilon is not None and self.label_noise_scale is not None:
            raise InvalidParameterError("give at most one of label_epsilon, label_noise_scale; got both.")
        return self.label_epsilon is not None or self.label_noise_scale is not None

    @property
    def rr(self) -> bool:
        """Labels protected by one randomized-response release (then ADMM on the released labels)."""
        return self.label_epsilon is not None and self.label_noise_scale is None and self.label_mechanism == "rr"

    @property
    def feature_private(self) -> bool:
        return any(getattr(self, k) is not None for k in FEATURE_BUDGETS)

    @property
    def mm(self) -> bool:
        """Private fits whose rounds cost budget (Gaussian label mechanism, or the gaussian feature
        mechanism) run the linearised coordinator (few rounds); ADMM otherwise — non-private fits,
        randomized-response labels (rounds are post-processing) and ``mechanism="paper"``."""
        return (self.label_mode and not self.rr) or (self.feature_private and self.mechanism == "gaussian")

    @property
    def refits(self) -> bool:
        """The label party refits its block on its exact labels after the run (and chooses against its
        own model): every label-private fit and every fit of the linearised protocol."""
        return self.label_mode or self.mm

    # ------------------------------------------------------------------ defaults
    def run_lam(self, n: int) -> float:
        """λ of the joint run. On randomized-response labels (flip probability q) the joint fit is only a
        direction for the label party to calibrate (its refit fits the weight α on exact labels), and
        label noise of variance ∝ 1/(n(1 − 2q)²) calls for more shrinkage: ``max(λ, 8/(n (1 − 2q)²))``
        (the constant chosen on breast_cancer, credit-g and a9a in benchmarks/private_utility/vertical.py).
        The label party's refit and its own model use λ itself."""
        if not self.rr:
            return float(self.lam)
        q = vl.flip_probability(float(self.label_epsilon))
        return max(float(self.lam), 8.0 / (n * (1.0 - 2.0 * q) ** 2))

    def run_rho(self, n_blocks: int, loss) -> float:
        """``"auto"``: 0.05 for ADMM; M · sup ℓ'' for the label-private protocol (the Jacobi
        majoriser of M blocks: ‖Σ_m D_m δ_m‖² ≤ M Σ_m ‖D_m δ_m‖²)."""
        if self.rho != "auto":
            return float(self.rho)
        return n_blocks * loss.hess_bound if self.mm else 0.05

    def rounds(self) -> int:
        """``"auto"``: 100 ADMM iterations; for the private protocol, 3 rounds when only the labels are
        protected (two label releases: round 1's party step sees the zero inbox and round T's hub step
        releases nothing) and 2 when the features are (one costly share per party: round 1's share of
        the zero inbox is 0 and costs nothing; later shares would feed the party's own noise back).
        Each release costs budget; the label party's exact refit does the rest."""
        if self.max_iter != "auto":
            return int(self.max_iter)
        if not self.mm:
            return 100
        return 2 if self.feature_private else 3

    def run_clip(self, n: int, rho: float, sigma_label: float) -> tuple[float, float]:
        """(V, V_∞) of the gaussian mechanism. ``"auto"``: per-sample scale ``c = sqrt(1 + σ_L²) + 3ρ``
        (|y_i| ≤ 1 for the logistic dual, shares of magnitude ≲ 3 per sample, plus the label noise the
        party receives), ``V = c·sqrt(N)``, ``V_∞ = 3c``. A number c gives the same with that c.
        V depends on nothing private (N is public)."""
        c = float(self.clip) if self.clip != "auto" else math.sqrt(1.0 + sigma_label ** 2) + 3.0 * rho
        return c * math.sqrt(n), 3.0 * c

    def bounds(self, n: int, loss) -> "vs.Bounds":
        """Radii of [Hu, Assumption 2.1] (enforced by projection whenever DP is on).

        A number b gives the paper's single b_1 = b for x, y and z. ``"auto"``:
        ``b_x = sqrt(2 ℓ(0)/λ)`` (the regularised optimum satisfies λ/2‖x*‖² ≤ mean ℓ(0); for the
        logistic loss ℓ(0) = ln 2; used for the logistic loss only, else 3√N), and
        ``b_y = b_z = 3√N`` (scores and summed-loss duals of magnitude ≤ 3 on average).
        """
        if self.bound not in ("auto", None):
            b = float(self.bound)
            return vs.Bounds(b, b, b)
        big = 3.0 * math.sqrt(n)
        bx = math.sqrt(2.0 * math.log(2.0) / float(self.lam)) if loss.name == "logistic" else big
        return vs.Bounds(bx, big, big)

    # ------------------------------------------------------------------ checks
    def _validate(self) -> None:
        check_positive("lam", self.lam)
        if self.rho != "auto":
            check_positive("rho", self.rho)
        if self.max_iter != "auto":
            check_int("max_iter", self.max_iter)
        check_choice("mechanism", self.mechanism, vs.MECHANISMS)
        check_choice("relation", self.relation, tuple(vs.RELATIONS))
        if self.clip != "auto":
            check_positive("clip", self.clip)
        check_choice("label_mechanism", self.label_mechanism, ("rr", "gaussian"))
        check_positive("label_block_scale", self.label_block_scale)
        if self.rr:
            check_positive("label_epsilon", self.label_epsilon)
            if self.loss != "logistic":
                raise InvalidParameterError(f"label_mechanism='rr' (randomized response) needs two-class labels; "
                                            f"loss={self.loss!r} has real-valued ones (use "
                                            "label_mechanism='gaussian').")
        if self.mm and self.loss == "poisson":
            raise PrivacyPreconditionError(
                "loss='poisson' has unbounded curvature (e^s), and the linearised private protocol (the gaussian "
                "feature mechanism or gaussian labels) needs a bound on it: fit counts without a feature-side or gaussian-label "
                "budget, or protect the labels with LabelPrivateVerticalRegression(loss='poisson').")
        if self.mm or self.rr:
            if self.label_epsilon is not None:
                check_positive("label_epsilon", self.label_epsilon)
            elif self.label_noise_scale is not None:
                check_positive("label_noise_scale", self.label_noise_scale, allow_zero=True)
            if self.adaptive_rho and self.mm:
                raise InvalidParameterError("adaptive_rho applies to ADMM; the label-private protocol uses a fixed "
                                            "rho (set adaptive_rho=False).")
            if self.penalty != "l2":
                raise PrivacyPreconditionError(f"penalty={self.penalty!r}: the label-private protocol needs "
                                               "penalty='l2'.")
        if self.tol is not None:
            check_positive("tol", self.tol, allow_zero=True)
        check_choice("accountant", self.accountant, ACCOUNTANTS)
        check_choice("penalty", self.penalty, ("l2", "l1", "elasticnet"))
        check_choice("solver", self.solver, SOLVERS)
        mode = self.mode
        if mode is not None:
            check_positive(mode, getattr(self, mode), allow_zero=mode == "noise_scale")
        check_open_unit("delta", self.delta)
        if not (self.bound == "auto" or self.bound is None):
            check_positive("bound", self.bound)
        if self.damping != "auto":
            check_positive("damping", self.damping, allow_zero=True)
            if (mode is not None or self.mm) and self.damping > 0:
                raise PrivacyPreconditionError(
                    f"damping={self.damping} changes the x-step the sensitivity bound covers; use damping=0 "
                    "(or 'auto') for a private fit.")
        check_choice("loss", self.loss, LOSSES)


__all__ = ["FEATURE_BUDGETS", "LOSSES", "VerticalParams"]
