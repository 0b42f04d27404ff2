"""Distributed (optionally differentially private) functional quantile regression [Zhou].

Pipeline: curves are split over ``workers``; a basis is obtained without pooling curves (FPCA
from the sum of the workers' moment matrices, its private Analyze-Gauss variant, or a fixed
Fourier / B-spline basis); every worker turns its curves into K scores; the scores are clipped to
``‖A_ij‖ ≤ c_1`` (the precondition of [Zhou, Thm 1]); F-ADMM / FDP-ADMM (``algorithms.functional_quantile``)
runs with one party per worker; ``β̂(t) = Σ_k ŵ_k φ_k(t)``. The runs and their noise calibration are
:mod:`dpadmm.algorithms.functional.driver`'s, the accounting :mod:`dpadmm.algorithms.functional.report`'s.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Sequence

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from .._validation import noise_seed
from ..algorithms.functional import driver as functional_driver, params as fp, statistics as fs
from ..algorithms.functional.params import BASES, FunctionalParams
from ..data.functional import check_curves
from ..engine import HUB
from ..exceptions import InvalidParameterError
from ._sklearn import one_matrix, target
from ..kernels.quantile import pinball_score

__all__ = ["BASES", "FunctionalQuantileRegressor", "private_fit_transcript"]


#: the estimator's parameters that are the fit's (:class:`~dpadmm.algorithms.functional.params.FunctionalParams`)
FIELDS = ("tau", "n_components", "basis", "penalty", "lam", "l1_ratio", "rho", "method", "max_iter", "fit_intercept",
          "epsilon", "delta", "total_epsilon", "c1", "c_w", "c2", "eta0", "curve_clip", "y_range", "workers",
          "accountant", "monitor", "min_n_epsilon")


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
        (``None``: ``MIN_N_EPSILON`` = 0, never: the comparison decides at every size).

    Notes
    -----
    Private fits hand over something usable (issue 18): the workers also release a DP τ-quantile of the
    response (noisy bisection over the range, ``algorithms.functional_statistics`` stage ``quantile``) — the
    *DP constant* and the ADMM's response location — and, after the ADMM, a noisy sum of their training
    pinball-loss differences model − DP constant (stage ``compare``); the model is handed over only if it
    wins by ``COMPARE_MARGIN`` noise sds, else the DP constant (``fallback_``, ``dp_constant_``,
    ``comparison_``; with ``total_epsilon`` the comparison's budget share grows to ``COMPARE_N_EPSILON``/(n·ε) of
    the rounds' worth, at most all of it, so that on few curves it can tell a good model from the constant). With
    ``total_epsilon`` and n·ε < ``min_n_epsilon`` (public, if set) no ADMM runs: the whole
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

    # ------------------------------------------------------------------ parameters
    def _params(self) -> FunctionalParams:
        """The fit's typed parameters (their checks: :class:`~dpadmm.algorithms.functional.params.FunctionalParams`)."""
        return FunctionalParams(**{k: getattr(self, k) for k in FIELDS})

    @property
    def _private(self) -> bool:
        return self.epsilon is not None or self.total_epsilon is not None

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
        res = functional_driver.fit(self._params(), functional_driver.Curves(X, y, grid), self.backend,
                                    random_state=self.random_state, noise_seed=noise_seed(self.random_state),
                                    callbacks=callbacks, transcript=transcript)  # noise_seed None: the workers' own
        for name in ("candidate_w", "comparison_threshold", "released_statistics"):  # what this fit has
            if getattr(res, name) is not None:
                setattr(self, name + "_", getattr(res, name))
        self.basis_, self.w_, self.coef_, self.intercept_, self.beta_ = res.basis, res.w, res.coef, res.intercept, res.beta
        self.response_location_, self.response_scale_ = res.response_location, res.response_scale
        self.score_scale_, self.score_clip_, self.y_range_ = res.score_scale, res.score_clip, res.y_range
        self.dp_constant_, self.fallback_, self.comparison_ = res.dp_constant, res.fallback, res.comparison
        self.grid_, self.n_features_in_, self.history_, self.n_iter_ = grid, X.shape[1], res.history, res.n_iter
        self.n_train_ = int(X.shape[0])  # public: the number of curves the budget shares were set from
        self.converged_, self.noise_source_, self.noise_multiplier_ = res.converged, res.noise_source, res.noise_multiplier
        self.c1_, self.clipped_fraction_, self.constant_only_ = res.c1, res.clipped_fraction, res.constant_only
        self._check_against_constant(X, y)
        self.privacy_ = res.report
        return self

    #: the protocol's public constants (:mod:`dpadmm.algorithms.functional.params`)
    SHARES, COMPARE_MARGIN, MIN_N_EPSILON, BAND = fp.SHARES, fp.COMPARE_MARGIN, fp.MIN_N_EPSILON, fp.BAND

    def _shares(self, L: int) -> tuple[int, int, int]:
        """(W_s, W_q, W_c): the budget share of each one-shot release, in ADMM rounds."""
        return self._params().shares(L, getattr(self, "n_train_", None))

    def _released_model(self, w, y_loc, y_scale) -> dict:
        """The model as public arrays (what the ``compare`` stage sends to the workers)."""
        return fs.released_model(basis=self.basis_, score_scale=self.score_scale_, clip=self.score_clip_, w=w,
                                 y_loc=y_loc, y_scale=y_scale, y_range=self.y_range_, dp_constant=self.dp_constant_,
                                 fit_intercept=self.fit_intercept, tau=self.tau, band=self.BAND)

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
