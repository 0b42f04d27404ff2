"""Distributed (optionally differentially private) functional quantile regression [Zhou].

Pipeline: curves are split over ``workers``; a basis is obtained without pooling curves (FPCA
from the sum of the workers' moment matrices, its private Analyze-Gauss variant, or a fixed
Fourier / B-spline basis); every worker turns its curves into K scores; the scores are clipped to
``‖A_ij‖ ≤ c_1`` (the precondition of [Zhou, Thm 1]); F-ADMM / FDP-ADMM (``algorithms.functional_quantile``)
runs with one party per worker; ``β̂(t) = Σ_k ŵ_k φ_k(t)``. The runs and their noise calibration are
:mod:`dpadmm.fit.functional`'s, the accounting :mod:`dpadmm.algorithms.functional.report`'s.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Callable, Sequence

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from .._history import History
from .._validation import check_choice, check_int, check_open_unit, check_positive, check_random_state, noise_seed
from ..algorithms.functional import messages as functional_messages, rules as functional_rules, statistics as fs
from ..algorithms.functional.report import constant_only_report, fit_report
from ..data.functional import check_curves
from ..engine import HUB
from ..exceptions import InvalidParameterError, PrivacyPreconditionError
from ..fit import functional as ff
from ..kernels import fpca as F
from ._sklearn import one_matrix, target
from ..kernels.quantile import pinball_score
from ..privacy.accountants import ACCOUNTANTS

BASES = ("auto", "fpca", "private-fpca", "fourier", "bspline")


class FunctionalQuantileRegressor(RegressorMixin, BaseEstimator):
    """τ-quantile regression of a scalar on a curve, fitted by F-ADMM / FDP-ADMM over workers [Zhou].

    Parameters
    ----------
    tau : quantile level in (0, 1).
    n_components : K, the number of basis functions / FPCA components (≤ grid size).
    basis : ``auto`` (default: ``fpca`` when non-private, ``bspline`` when private — its centring and scales
        need only a (K+1)² private moment release, where private FPCA noises a (T+1)² one and loses
        far more: MISE 0.0110 vs 0.439 on the simulation at n = 100,000, 10 workers, total ε = 2, seed 0), ``fpca`` (the sum
        of per-worker moment matrices = pooled FPCA; non-private fits only), ``private-fpca`` (Gaussian noise
        on each worker's moment matrix of clipped curves, accounted for) or ``fourier`` / ``bspline`` (fixed
        functions; the centring and scales of their scores come from the workers' moment sums, noised and
        accounted in a private fit). Nothing pooled is released in the clear in a private fit.
    penalty, lam, l1_ratio : P ∈ {l1, l2 (½‖w‖²), elasticnet}, weight λ ≥ 0 as in [Zhou, eq. 12–13]
        (each worker carries λ/M). The intercept is not penalised.
    rho : ADMM penalty ρ > 0 (the paper uses 0.1).
    method : ``fast`` (default: the linearised FDP-ADMM step [Zhou, eq. 21] on the smoothed check loss with
        a shrinking bandwidth and step, 200 rounds, averaged output; beyond the paper), ``exact`` (F-ADMM,
        exact local solves [Zhou, eq. 16], residual-balanced ρ, stopped when the residuals fall below
        1e-5 — reaches centralised QR) or ``paper`` (FDP-ADMM as published: [Zhou, Thm 2] step size,
        output w^L). Every method works on standardised data — the response as (y − a)/b (pooled mean
        and standard deviation), the scores divided by their standard deviations (``paper``: by the
        largest) — and maps the result back, so ρ, λ, c_1, the steps and the tolerance are unit-free:
        λ penalises the standardised coefficients and ρ couples them.
    max_iter : L rounds (``None``: the method's default).
    epsilon, delta : per-iteration budget of [Zhou, Thm 1] (the paper's convention); or
    total_epsilon : a total budget for the whole run at ``delta`` (noise calibrated with dp-accounting).
    c1 : clipping radius of the standardised scores in private fits (``None``: the method's default, 4;
        3 for ``paper``). Non-private fits do not clip.
    c_w, c2, eta0 : [Zhou, Thm 2] constants (c_w stands for the unknown ‖w*‖) and the constant step.
    curve_clip : c_X, public L² radius to which curves are clipped before the private moment release
        (``None``: estimated privately from the workers' noisy norm histograms, accounted for).
    y_range : public (lo, hi) range of the response used for its location and scale in a private fit
        (``None``: estimated privately from the workers' noisy response histograms, accounted for).
        Non-private fits use the pooled mean and standard deviation.
    workers : number of workers M (curves are split at random, as evenly as possible).
    min_n_epsilon : with ``total_epsilon``, fits with n·ε below it hand over the DP constant without an ADMM run
        (``None``: ``MIN_N_EPSILON`` = 2500; 0 always runs the ADMM).

    Notes
    -----
    Private fits hand over something usable (issue 18): the workers also release a DP τ-quantile of the
    response (noisy bisection over the range, ``algorithms.functional_statistics`` stage ``quantile``) — the
    *DP constant* and the ADMM's response location — and, after the ADMM, a noisy sum of their training
    pinball-loss differences model − DP constant (stage ``compare``); the model is handed over only if it
    wins by ``COMPARE_MARGIN`` noise sds, else the DP constant (``fallback_``, ``dp_constant_``,
    ``comparison_``). With ``total_epsilon`` and n·ε < ``MIN_N_EPSILON`` (public) no ADMM runs: the whole
    budget goes to the DP constant (``constant_only_``). Predictions use the clipped standardised scores the
    ADMM was fitted on and never leave ``y_range_`` (the public range, or the privately estimated one).
    """

    def __init__(self, *, tau: float = 0.5, n_components: int = 6, basis: str = "auto", penalty: str = "l1",
                 lam: float = 0.05, l1_ratio: float = 0.5, rho: float = 0.1, method: str = "fast",
                 max_iter: int | None = None, fit_intercept: bool = True, epsilon: float | None = None,
                 delta: float = 1e-5, total_epsilon: float | None = None, c1: float | None = None, c_w: float = 1.0,
                 c2: float = 1.0, eta0: float | None = None, curve_clip: float | None = None,
                 y_range: tuple[float, float] | None = None, workers: int = 4,
                 accountant: str = "pld", random_state: Any = None, backend: Any = "inprocess", monitor: bool | None = None,
                 min_n_epsilon: float | None = None):
        self.min_n_epsilon = min_n_epsilon
        self.tau = tau
        self.n_components = n_components
        self.basis = basis
        self.penalty = penalty
        self.lam = lam
        self.l1_ratio = l1_ratio
        self.rho = rho
        self.method = method
        self.max_iter = max_iter
        self.fit_intercept = fit_intercept
        self.epsilon = epsilon
        self.delta = delta
        self.total_epsilon = total_epsilon
        self.c1 = c1
        self.c_w = c_w
        self.c2 = c2
        self.eta0 = eta0
        self.curve_clip = curve_clip
        self.y_range = y_range
        self.workers = workers
        self.accountant = accountant
        self.random_state = random_state
        self.backend = backend
        self.monitor = monitor

    # ------------------------------------------------------------------ validation
    def _validate(self, n: int, T: int) -> None:
        check_open_unit("tau", self.tau)
        check_int("n_components", self.n_components)
        if self.n_components > T:
            raise InvalidParameterError(f"n_components must be at most the number of grid points ({T}), "
                                        f"got n_components={self.n_components}.")
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
        if self.workers > n:
            raise InvalidParameterError(f"workers must be at most the curves (n_samples = {n}), got workers={self.workers}.")
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
        if self._private and self.basis == "fpca":
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

    @property
    def _private(self) -> bool:
        return self.epsilon is not None or self.total_epsilon is not None

    # ------------------------------------------------------------------ pooled statistics
    def _basis_kind(self) -> str:
        if self.basis == "auto":
            return "bspline" if self._private else "fpca"
        return self.basis

    def _fit_constant_only(self, parts, parts_y, X, y, grid, nseed, transcript=None):
        """Too few curves for the budget (n·ε < MIN_N_EPSILON, public): the whole budget goes to the DP
        τ-quantile (B bisection counts, after the response histogram if no public range), handed over as
        the model; no ADMM run (at this size its noise swamps any signal — the benchmark's finding)."""
        res, z, n_ranges = ff.run_constant_only(parts, parts_y, grid, y_range=self.y_range, tau=self.tau,
                                                total_epsilon=self.total_epsilon, delta=self.delta,
                                                accountant=self.accountant, nseed=nseed, backend=self.backend,
                                                transcript=transcript)
        st = res.hub_state
        K = int(self.n_components)
        self.basis_ = F.bspline_basis(grid, K)  # fixed functions (no data): keeps the model's interface
        self.dp_constant_ = float(st.sums["quantile"])
        self.y_range_ = (float(st.y_range[0]), float(st.y_range[1]))
        self.fallback_, self.comparison_ = "dp-constant", None
        self.response_location_, self.response_scale_ = self.dp_constant_, 1.0
        self.score_scale_, self.score_clip_ = np.ones(K), None
        self.w_, self.coef_, self.intercept_ = np.zeros(K + 1), np.zeros(K), self.dp_constant_
        self.beta_ = self.basis_.curve(self.coef_)
        self.grid_, self.n_features_in_ = grid, X.shape[1]
        self.history_, self.n_iter_, self.converged_ = {}, 0, False
        self.noise_source_, self.noise_multiplier_ = res.noise_source, z
        self.c1_ = self.clipped_fraction_ = None
        self._check_against_constant(X, y)
        self.privacy_ = constant_only_report(res.ledger, delta=float(self.delta), accountant=self.accountant,
                                             n_epsilon=X.shape[0] * float(self.total_epsilon),
                                             min_n_epsilon=self._min_n_epsilon, n_ranges=n_ranges, z=z,
                                             tau=self.tau, quantile_steps=fs.QUANTILE_STEPS, y_range=self.y_range,
                                             noise_source=res.noise_source)
        return self

    # ------------------------------------------------------------------ fit
    def fit(self, X, y, *, grid=None, callbacks: Sequence[Callable] = (), transcript: Callable | None = None):
        """Fit on curves X (n, T) observed on ``grid`` (default equispaced on [0, 1]) and responses y (n,).

        Two protocol runs over the same workers: the pooled statistics (basis, centring, scales —
        noised and accounted in a private fit, see ``algorithms.functional_statistics``), then F-ADMM /
        FDP-ADMM on standardised data: the response as (y − a)/b and the scores at unit scale (see
        ``algorithms.functional_quantile.METHODS``); ``coef_``/``intercept_`` are mapped back to the
        data's units. The fitted model is compared on the training data with the best constant (the
        training τ-quantile): ``worse_than_constant_`` (warned once when true).
        ``transcript(run, round, sender, receiver, message, kind)`` sees every message of both runs
        (``run`` = ``"statistics"`` or ``"admm"``).
        """
        self.__dict__.pop("n_features_in_", None)  # a refit is a new fit: any grid; scikit-learn's checks and messages
        X, y, grid = check_curves(one_matrix(self, X, sparse=False), target(y, classes=False), grid)
        n, T = X.shape
        self._validate(n, T)
        mcfg = dict(functional_rules.METHODS[self.method])
        L = int(self.max_iter or mcfg["iterations"])
        private = self._private
        c1 = float(self.c1 if self.c1 is not None else mcfg["c1"])
        eta0 = float(self.eta0 if self.eta0 is not None else mcfg["eta0"])
        parts, parts_y = ff.split_workers(X, y, self.workers, check_random_state(self.random_state))
        nseed = noise_seed(self.random_state)  # None: each worker draws its noise from its own OS entropy
        self.constant_only_ = bool(private and self.total_epsilon is not None
                                   and n * float(self.total_epsilon) < self._min_n_epsilon)
        if self.constant_only_:
            return self._fit_constant_only(parts, parts_y, X, y, grid, nseed, transcript)
        budget = ff.calibrate(epsilon=self.epsilon, total_epsilon=self.total_epsilon, delta=self.delta,
                              accountant=self.accountant, L=L, shares=self._shares(L), private=private,
                              y_range=self.y_range, curve_clip=self.curve_clip)
        z, eps_iter, delta_iter = budget.z, budget.eps_iter, budget.delta_iter
        pooled = ff.pooled_statistics(parts, parts_y, grid, n_components=self.n_components, kind=self._basis_kind(),
                                      y_range=self.y_range, curve_clip=self.curve_clip, tau=self.tau,
                                      z_stats=budget.z_stats, z_quantile=budget.z_quantile, nseed=nseed,
                                      backend=self.backend, transcript=transcript)
        basis, y_loc, y_scale, stats = pooled.basis, pooled.y_loc, pooled.y_scale, pooled.state
        if not self.fit_intercept:  # no intercept to absorb a shift: scale the response only
            y_scale = math.sqrt(y_scale * y_scale + y_loc * y_loc)
            y_loc = 0.0
        scale = ff.score_scale(basis, mcfg["standardize"], pooled.var_floor)
        clip = c1 if private else None  # clipping is a privacy precondition; non-private fits use the raw scores
        c_total = math.sqrt(c1 * c1 + 1.0) if self.fit_intercept else c1
        settings = functional_messages.Settings.make([self.tau], lam=self.lam, noise_multiplier=z, eps_iter=eps_iter, delta_iter=delta_iter)
        monitor = (not private) if self.monitor is None else bool(self.monitor)
        self.clipped_fraction_ = None
        if clip is None:
            self.clipped_fraction_ = 0.0
        elif monitor:  # opt-in monitoring: a pooled count the guarantee does not cover
            self.clipped_fraction_ = sum(int(np.sum(np.linalg.norm(basis.scores(Xi) / scale, axis=1) > c1))
                                         for Xi in parts) / n
        result = ff.run_admm(parts, parts_y, basis=basis, scale=scale, y_loc=y_loc, y_scale=y_scale, clip=clip,
                             settings=settings, method=mcfg, L=L, rho=self.rho, penalty=self.penalty,
                             l1_ratio=self.l1_ratio, fit_intercept=self.fit_intercept, c_total=c_total, c2=self.c2,
                             c_w=self.c_w, eta0=eta0, nseed=nseed, backend=self.backend, callbacks=callbacks,
                             monitor=monitor, transcript=transcript)
        w = np.array(result.hub_state.output[0, 0], dtype=float)
        self.basis_ = basis
        self.response_location_, self.response_scale_ = y_loc, y_scale
        self.score_scale_ = scale
        self.score_clip_ = clip
        if private:  # predictions never leave the public (or DP-estimated) response range
            self.y_range_ = (float(stats.y_range[0]), float(stats.y_range[1]))
        elif self.y_range is not None:
            self.y_range_ = (float(self.y_range[0]), float(self.y_range[1]))
        else:
            self.y_range_ = (-math.inf, math.inf)
        self.dp_constant_ = float(stats.sums["quantile"]) if private else None
        self.fallback_ = None
        self.comparison_ = None
        compare_ledger = None
        if private:
            self.candidate_w_ = w.copy()  # the ADMM's model (post-processing of released messages)
            model = self._released_model(w, y_loc, y_scale) | {"constant": self.dp_constant_}
            handed = ff.hand_over(parts, parts_y, grid, model, w, y_loc=y_loc, y_scale=y_scale,
                                  fit_intercept=self.fit_intercept, budget=budget, margin=self.COMPARE_MARGIN,
                                  nseed=nseed, backend=self.backend, transcript=transcript)
            w, self.fallback_, compare_ledger = handed.w, handed.fallback, handed.ledger
            self.comparison_, self.comparison_threshold_ = handed.comparison, handed.threshold
        self.w_ = w
        coef = y_scale * w[: basis.n_components] / scale
        self.coef_ = coef
        self.intercept_ = float(y_loc + y_scale * w[-1]) if self.fit_intercept else float(y_loc)
        self.released_statistics_ = {"sums": stats.sums, "y_range": stats.y_range, "curve_clip": stats.curve_clip}
        self.beta_ = basis.curve(coef)
        self.grid_ = grid
        self.n_features_in_ = T
        self.history_ = History(result.history, monitored=monitor, private=private)
        self.n_iter_ = result.rounds
        self.converged_ = bool(result.converged)
        self.noise_source_ = result.noise_source
        self.noise_multiplier_ = z
        self.c1_ = c_total
        self._check_against_constant(X, y)
        if private:
            self.privacy_ = fit_report(
                [pooled.ledger, result.ledger, compare_ledger], delta=float(self.delta), accountant=self.accountant,
                eps_iter=eps_iter, delta_iter=delta_iter, rounds=result.rounds, z=z, shares=self._shares(L),
                quantile_steps=fs.QUANTILE_STEPS, c1=c1, c_total=c_total, fit_intercept=self.fit_intercept,
                clipped_fraction=self.clipped_fraction_, curve_clip=stats.curve_clip,
                centered_clip=stats.sums["centered_clip"], curve_clip_given=self.curve_clip is not None,
                y_range=self.y_range, basis_kind=self._basis_kind(), tau=self.tau, method=self.method,
                handed_over=self.fallback_, monitor=monitor, noise_source=result.noise_source)
        else:
            self.privacy_ = None
        return self

    #: budget shares of the one-shot releases, as fractions of the L ADMM rounds (a total budget only): each
    #: pooled statistic, the DP τ-quantile (all B bisection counts) and the model-vs-constant comparison
    SHARES = {"statistic": 0.1, "quantile": 0.5, "compare": 0.25}
    COMPARE_MARGIN = 2.0
    #: private fits with n·ε below this (public) skip the ADMM and spend the whole budget on the DP constant
    #: (private-utility benchmark: below it the model never beat the DP constant on any data set or seed)
    MIN_N_EPSILON = 2500.0
    #: private predictions stay within BAND response scales b of the DP constant (and inside the range)
    BAND = 3.0

    @property
    def _min_n_epsilon(self) -> float:
        return float(self.MIN_N_EPSILON if self.min_n_epsilon is None else self.min_n_epsilon)

    def _shares(self, L: int) -> tuple[int, int, int]:
        """(W_s, W_q, W_c): the budget share of each one-shot release, in ADMM rounds (see ``fit``)."""
        if self.total_epsilon is None:
            return 1, 1, 1
        return tuple(max(1, int(round(L * self.SHARES[k]))) for k in ("statistic", "quantile", "compare"))

    def _released_model(self, w, y_loc, y_scale) -> dict:
        """The model as public arrays (what the ``compare`` stage sends to the workers)."""
        lo, hi = self.y_range_
        if self.dp_constant_ is not None:  # private: predictions within BAND response scales of the DP constant
            lo = max(lo, self.dp_constant_ - self.BAND * y_scale)
            hi = min(hi, self.dp_constant_ + self.BAND * y_scale)
        return {"basis": self.basis_, "score_scale": np.asarray(self.score_scale_, float), "clip": self.score_clip_,
                "w": np.asarray(w, float) if self.fit_intercept else np.r_[np.asarray(w, float), 0.0],
                "y_loc": float(y_loc), "y_scale": float(y_scale), "band": (float(lo), float(hi)),
                "unit": float(y_scale), "tau": float(self.tau)}

    def _check_against_constant(self, X: np.ndarray, y: np.ndarray) -> None:
        """Training pinball loss of the fit vs the best constant (the training τ-quantile); warns once."""
        self.train_pinball_loss_ = pinball_score(y, self.predict(X), self.tau)
        self.constant_pinball_loss_ = pinball_score(y, np.quantile(y, self.tau), self.tau)
        self.worse_than_constant_ = bool(self.train_pinball_loss_ > self.constant_pinball_loss_)
        if self.worse_than_constant_:
            local = " — computed here on the training data passed to fit: not covered by ε" if self._private else ""
            warnings.warn(f"the fitted model is worse on the training data than the constant τ-quantile (pinball loss "
                          f"{self.train_pinball_loss_:.4g} vs {self.constant_pinball_loss_:.4g}{local}); more rounds, a "
                          "larger privacy budget or fewer components may help.", UserWarning, stacklevel=3)

    # ------------------------------------------------------------------ predict
    def predict(self, X) -> np.ndarray:
        """Predicted τ-quantile ``∫ β̂ (X − μ) + b`` for curves on the training grid."""
        check_is_fitted(self, "coef_")
        X = check_curves(A := one_matrix(self, X, sparse=False), np.zeros(A.shape[0]), self.grid_)[0]  # fitted grid
        if getattr(self, "constant_only_", False):
            return np.full(X.shape[0], self.intercept_)
        if getattr(self, "score_clip_", None) is None:
            pred = self.basis_.scores(X) @ self.coef_ + self.intercept_
            return np.clip(pred, *self.y_range_) if hasattr(self, "y_range_") else pred
        # the model the ADMM fitted is on clipped standardised scores: predict on the same, inside the range
        return fs.model_predict(self._released_model(self.w_, self.response_location_, self.response_scale_), X)

    def __sklearn_tags__(self):  # sparse curves are densified; score is the negative pinball loss (≤ 0), not an R²
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = tags.regressor_tags.poor_score = True
        return tags

    def score(self, X, y, sample_weight=None) -> float:
        """Negative mean pinball loss at τ (higher is better)."""
        return -pinball_score(y, self.predict(X), self.tau)


def private_fit_transcript(X, y, *, grid=None, **params):
    """Run one private fit and return ``(messages, epsilon)``: every message the central machine
    received from a worker in the statistics and ADMM runs, as ``(run, round, sender, message)`` —
    what the adversary of the ``functional`` threat model sees — and the reported total ε (for
    end-to-end audits). ``params`` are :class:`FunctionalQuantileRegressor` parameters and must make
    the fit private (``epsilon`` or ``total_epsilon``)."""
    msgs: list = []

    def tap(run, round_, sender, receiver, message, kind):
        if receiver == HUB and kind == "protocol":
            msgs.append((run, round_, sender, message))

    est = FunctionalQuantileRegressor(**params)
    if not est._private:
        raise InvalidParameterError("private_fit_transcript needs epsilon or total_epsilon.")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y, grid=grid, transcript=tap)
    return msgs, float(est.privacy_.epsilon)
