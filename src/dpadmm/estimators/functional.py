"""Distributed (optionally differentially private) functional quantile regression [Zhou].

Pipeline: curves are split over ``workers``; a basis is obtained without pooling curves (FPCA
from the sum of the workers' moment matrices, its private Analyze-Gauss variant, or a fixed
Fourier / B-spline basis); every worker turns its curves into K scores; the scores are clipped to
``‖A_ij‖ ≤ c_1`` (the precondition of [Zhou, Thm 1]); F-ADMM / FDP-ADMM (``algorithms.functional_quantile``)
runs through ``engine.run`` with one party per worker; ``β̂(t) = Σ_k ŵ_k φ_k(t)``.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Callable, Sequence

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin

from .. import engine
from .._validation import check_choice, check_int, check_open_unit, check_positive, check_random_state, noise_seed
from ..algorithms import functional_quantile as fq
from ..backends import PartySpec, get_backend
from ..data.functional import check_curves
from ..exceptions import InvalidParameterError, PrivacyPreconditionError
from ..kernels import fpca as F
from ..kernels.quantile import pinball_score
from ..privacy.accountants import ACCOUNTANTS
from ..privacy.zhou import calibrate_total, iteration_noise_multiplier, zhou_report
from ..privacy.threats import finish

BASES = ("fpca", "private-fpca", "fourier", "bspline")


class FunctionalQuantileRegressor(RegressorMixin, BaseEstimator):
    """τ-quantile regression of a scalar on a curve, fitted by F-ADMM / FDP-ADMM over workers [Zhou].

    Parameters
    ----------
    tau : quantile level in (0, 1).
    n_components : K, the number of basis functions / FPCA components (≤ grid size).
    basis : ``fpca`` (sum of per-worker moment matrices = pooled FPCA; not private), ``private-fpca``
        (Gaussian noise on each worker's moment matrix, accounted for; needs ``curve_clip``),
        ``fourier`` or ``bspline`` (fixed, no data, no privacy cost).
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
    curve_clip : c_X, L² radius to which curves are clipped for ``private-fpca``.
    workers : number of workers M (curves are split at random, as evenly as possible).
    """

    def __init__(self, *, tau: float = 0.5, n_components: int = 6, basis: str = "fpca", penalty: str = "l1",
                 lam: float = 0.05, l1_ratio: float = 0.5, rho: float = 0.1, method: str = "fast",
                 max_iter: int | None = None, fit_intercept: bool = True, epsilon: float | None = None,
                 delta: float = 1e-5, total_epsilon: float | None = None, c1: float | None = None, c_w: float = 1.0,
                 c2: float = 1.0, eta0: float | None = None, curve_clip: float | None = None, workers: int = 4,
                 accountant: str = "pld", random_state: Any = None, backend: Any = "inprocess", monitor: bool | None = None):
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
        check_choice("penalty", self.penalty, fq.PENALTIES)
        check_positive("lam", self.lam, allow_zero=True)
        if self.penalty == "elasticnet":
            check_open_unit("l1_ratio", self.l1_ratio)
        check_positive("rho", self.rho)
        check_choice("method", self.method, tuple(fq.METHODS))
        if self.max_iter is not None:
            check_int("max_iter", self.max_iter)
        check_int("workers", self.workers)
        if self.workers > n:
            raise InvalidParameterError(f"workers must be at most the number of curves ({n}), got workers={self.workers}.")
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
        if self.basis == "private-fpca" and self.curve_clip is None:
            raise PrivacyPreconditionError("basis='private-fpca' needs curve_clip (the L2 radius c_X the curves are "
                                           "clipped to); pass curve_clip=... (--curve-clip).")

    @property
    def _private(self) -> bool:
        return self.epsilon is not None or self.total_epsilon is not None

    # ------------------------------------------------------------------ pooled statistics
    def _basis(self, parts: list[np.ndarray], grid: np.ndarray, z: float, rng: np.random.Generator):
        """Basis, score standard deviations and the released-statistics record.

        Non-private: the pooled moment matrix Σ_i S_i (a sum of per-worker sums). The scores' standard
        deviations are the FPCA eigenvalues' square roots, or for a fixed basis diag(Φᵀ C Φ)^{1/2}.
        """
        K = int(self.n_components)
        q = F.trapezoid_weights(grid)
        if self.basis in ("fourier", "bspline"):
            fixed = F.fourier_basis(grid, K) if self.basis == "fourier" else F.bspline_basis(grid, K)
            S = sum(F.moment_sum(X, q) for X in parts)
            basis = F.fixed_from_moments(fixed, S)
            return basis, None
        if self.basis == "fpca":
            S = sum(F.moment_sum(X, q) for X in parts)  # Σ_i S_i = pooled moments
            return F.fpca_from_moments(S, grid, K), None
        clip = float(self.curve_clip)
        sens = F.moment_sensitivity(clip)
        z_fpca = z if z > 0 else 1.0
        S = sum(F.noisy_moment_sum(F.moment_sum(X, q, clip), z_fpca * sens, rng) for X in parts)
        return F.fpca_from_moments(S, grid, K), z_fpca

    @staticmethod
    def _score_scale(basis: F.Basis, how: str) -> np.ndarray:
        """Divisors of the scores: their standard deviations (``each``) or the largest one (``common``)."""
        sd = np.sqrt(np.maximum(basis.eigenvalues, 0.0))
        top = float(sd.max()) if sd.size and sd.max() > 0 else 1.0
        if how == "common":
            return np.full(sd.shape, top)
        return np.maximum(sd, 1e-6 * top)

    @staticmethod
    def _response_scale(parts_y: list[np.ndarray]) -> tuple[float, float]:
        """Location and scale of the response: pooled mean and standard deviation from the workers'
        sums (n_i, Σy, Σy²) (non-private)."""
        n = sum(v.size for v in parts_y)
        s1 = sum(float(v.sum()) for v in parts_y)
        mean = s1 / n
        ss = sum(float(((v - mean) ** 2).sum()) for v in parts_y)
        sd = math.sqrt(ss / n)
        return mean, (sd if sd > 0 else max(abs(mean), 1.0))

    # ------------------------------------------------------------------ fit
    def fit(self, X, y, *, grid=None, callbacks: Sequence[Callable] = ()):
        """Fit on curves X (n, T) observed on ``grid`` (default equispaced on [0, 1]) and responses y (n,).

        Internally the response is standardised to (y − a)/b and the scores to unit scale (see
        ``algorithms.functional_quantile.METHODS``); ``coef_``/``intercept_`` are mapped back to the
        data's units. The fitted model is compared on the training data with the best constant (the
        training τ-quantile): ``worse_than_constant_`` (warned once when true).
        """
        X, y, grid = check_curves(X, y, grid)
        n, T = X.shape
        self._validate(n, T)
        mcfg = dict(fq.METHODS[self.method])
        L = int(self.max_iter or mcfg["iterations"])
        private = self._private
        c1 = float(self.c1 if self.c1 is not None else mcfg["c1"])
        eta0 = float(self.eta0 if self.eta0 is not None else mcfg["eta0"])
        seed = check_random_state(self.random_state)
        rng = np.random.default_rng(seed.spawn(1)[0])
        M = int(self.workers)
        parts_idx = [np.sort(i) for i in np.array_split(rng.permutation(n), M)]
        parts = [X[i] for i in parts_idx]
        parts_y = [y[i] for i in parts_idx]
        extra = 1 if self.basis == "private-fpca" else 0
        z = 0.0
        eps_iter, delta_iter = math.inf, 1.0
        if self.epsilon is not None:
            z = iteration_noise_multiplier(float(self.epsilon), float(self.delta))  # [Zhou, Thm 1]
            eps_iter, delta_iter = float(self.epsilon), float(self.delta)
        elif self.total_epsilon is not None:
            z = calibrate_total(float(self.total_epsilon), float(self.delta), L, extra_releases=extra,
                                accountant=self.accountant)
            eps_iter, delta_iter = math.sqrt(2.0 * math.log(1.25 / self.delta)) / z, float(self.delta)
        basis, z_fpca = self._basis(parts, grid, z, rng)
        scale = self._score_scale(basis, mcfg["standardize"])
        y_loc, y_scale = self._response_scale(parts_y)
        clip = c1 if private else None  # clipping is a privacy precondition; non-private fits use the raw scores
        c_total = math.sqrt(c1 * c1 + 1.0) if self.fit_intercept else c1
        settings = fq.Settings.make([self.tau], lam=self.lam, noise_multiplier=z, eps_iter=eps_iter, delta_iter=delta_iter)
        names = [f"worker{i + 1}" for i in range(M)]
        decay_start = L * (1.0 - mcfg["average_last"]) if mcfg["average_last"] > 0 else math.inf
        specs = []
        clipped = 0
        for name, Xi, yi in zip(names, parts, parts_y):
            raw = basis.scores(Xi) / scale
            A = F.clip_rows(raw, clip)  # ‖A_ij‖ ≤ c_1 [Zhou, Lemma 2]
            if clip is not None:
                clipped += int(np.sum(np.linalg.norm(raw, axis=1) > c1))
            if self.fit_intercept:
                A = np.concatenate([A, np.ones((A.shape[0], 1))], axis=1)
            opts = dict(rho=float(self.rho), n_workers=M, penalty=self.penalty, l1_ratio=float(self.l1_ratio),
                        fit_intercept=bool(self.fit_intercept), local_step=mcfg["local_step"], step=mcfg["step"],
                        c1=c_total, c2=float(self.c2), c_w=float(self.c_w), eta0=eta0, decay_start=decay_start,
                        smooth=fq.smooth_schedule(mcfg.get("smooth", (0.0, 1.0, 0.0)), L, mcfg["average_last"]),
                        worker_names=(name,))
            specs.append(PartySpec(name, fq.setup_party, (name, A, (yi - y_loc) / y_scale, settings, opts),
                                   fq.party_step, fq.party_diagnostics, owner=name))
        self.clipped_fraction_ = clipped / n
        Kp = basis.n_components + (1 if self.fit_intercept else 0)
        hub_cfg = fq.HubConfig(float(self.rho), tuple(names), (1, 1, Kp), average_last=mcfg["average_last"], rounds=L,
                               tol=float(mcfg["tol"]), adapt_rho=bool(mcfg["adapt_rho"]))
        hub = engine.Hub(hub_cfg, fq.init_hub, fq.hub_step, fq.hub_metrics)
        backend = get_backend(self.backend)
        nseed = noise_seed(self.random_state)  # None: each worker draws its noise from its own OS entropy
        monitor = (not self._private) if self.monitor is None else bool(self.monitor)
        backend.start(specs, noise_seed=nseed)
        try:
            result = engine.run(hub=hub, parties=specs, backend=backend, rounds=L, noise_seed=nseed, callbacks=callbacks,
                                monitor=monitor, stop_on_convergence=mcfg["tol"] > 0, started=True)
        finally:
            backend.close()
        w = result.hub_state.output[0, 0]
        coef = y_scale * w[: basis.n_components] / scale
        self.basis_ = basis
        self.coef_ = coef
        self.intercept_ = float(y_loc + y_scale * w[-1]) if self.fit_intercept else float(y_loc)
        self.response_location_, self.response_scale_ = y_loc, y_scale
        self.score_scale_ = scale
        self.beta_ = basis.curve(coef)
        self.grid_ = grid
        self.n_features_in_ = T
        self.history_ = result.history
        self.n_iter_ = result.rounds
        self.converged_ = bool(result.converged)
        self.noise_source_ = result.noise_source
        self.noise_multiplier_ = z
        self.c1_ = c_total
        self._check_against_constant(X, y)
        if private:
            assumptions = [
                {"name": f"||A_ij|| <= c1 = {c_total:.4g} [Zhou, Lemma 2]", "status": "enforced",
                 "detail": f"standardised scores clipped to {c1:g}" + (" plus the unit intercept column" if self.fit_intercept else "")
                           + f"; {self.clipped_fraction_:.2%} of rows were clipped"},
                {"name": "sensitivity 2c1/(m_i(rho + 1/eta))", "status": "corrected",
                 "detail": "[Zhou, Lemma 2] prints m_i^2; the update moves by 2c1/(m_i(rho+1/eta)) (docs/algorithms.md §3)"},
            ]
            notes = (["monitor=True: monitoring values in history_ were computed from the workers' data and left "
                      "them un-noised; they are NOT covered by the guarantee"] if monitor else [])
            if self.basis == "fpca":
                notes.append("basis='fpca' uses the workers' curves without noise; use basis='private-fpca' or a fixed basis")
            self.privacy_ = zhou_report(result.ledger, delta=float(self.delta), accountant=self.accountant,
                                        eps_iter=eps_iter, delta_iter=delta_iter,
                                        fpca_noise_multiplier=z_fpca, assumptions=assumptions, notes=notes)
            finish(self.privacy_, threat_model="functional", noise_source=result.noise_source)
        else:
            self.privacy_ = None
        return self

    def _check_against_constant(self, X: np.ndarray, y: np.ndarray) -> None:
        """Training pinball loss of the fit vs the best constant (the training τ-quantile); warns once."""
        self.train_pinball_loss_ = pinball_score(y, self.predict(X), self.tau)
        self.constant_pinball_loss_ = pinball_score(y, np.quantile(y, self.tau), self.tau)
        self.worse_than_constant_ = bool(self.train_pinball_loss_ > self.constant_pinball_loss_)
        if self.worse_than_constant_:
            warnings.warn(f"the fitted model is worse on the training data than the constant τ-quantile (pinball loss "
                          f"{self.train_pinball_loss_:.4g} vs {self.constant_pinball_loss_:.4g}); more rounds, a "
                          "larger privacy budget or fewer components may help.", UserWarning, stacklevel=3)

    # ------------------------------------------------------------------ predict
    def _check_fitted(self):
        if not hasattr(self, "coef_"):
            from sklearn.exceptions import NotFittedError

            raise NotFittedError("this FunctionalQuantileRegressor is not fitted yet; call fit first.")

    def predict(self, X) -> np.ndarray:
        """Predicted τ-quantile ``∫ β̂ (X − μ) + b`` for curves on the training grid."""
        self._check_fitted()
        X, _, _ = check_curves(X, np.zeros(np.shape(X)[0] if np.ndim(X) == 2 else 0), self.grid_)
        return self.basis_.scores(X) @ self.coef_ + self.intercept_

    def score(self, X, y, sample_weight=None) -> float:
        """Negative mean pinball loss at τ (higher is better)."""
        return -pinball_score(y, self.predict(X), self.tau)
