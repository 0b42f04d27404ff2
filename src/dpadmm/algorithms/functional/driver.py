"""One functional quantile regression fit [Zhou]: parameters and curves → the noise calibration (ε → z, once) →
the pooled statistics → F-ADMM / FDP-ADMM → (private) the model-vs-DP-constant hand-over → :class:`FitResult`.

The folder's driver (the stages are :mod:`.driver_stages`'s; ``tests/unit/test_architecture.py`` lets ``driver*``
modules import the engine, the backends and the fit runner); the accounting is :mod:`.report`'s."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ..._history import History
from ..._validation import check_random_state
from ...kernels import fpca as F
from . import driver_stages as ff
from . import messages as functional_messages, rules as functional_rules, statistics as fs
from .params import BAND, COMPARE_MARGIN, FunctionalParams
from .report import constant_only_report, fit_report


@dataclass(frozen=True)
class Curves:
    """The data of a fit: curves ``X`` (n, T) on ``grid`` (T,) and responses ``y`` (n,), already checked."""

    X: np.ndarray
    y: np.ndarray
    grid: np.ndarray


@dataclass
class FitResult:
    """A functional fit, in the data's units: the basis, β's coefficients ``coef``/``intercept`` (and the
    standardised ``w``), the response's location/scale, the scores' scale and clip, the prediction range, the DP
    constant and which model was handed over (private fits), the run's record and the privacy report.
    ``candidate_w``, ``comparison_threshold`` and ``released_statistics`` are None where the fit has none."""

    basis: Any
    w: np.ndarray
    coef: np.ndarray
    intercept: float
    beta: np.ndarray
    response_location: float
    response_scale: float
    score_scale: np.ndarray
    score_clip: float | None
    y_range: tuple
    dp_constant: float | None
    fallback: str | None
    comparison: float | None
    history: Any
    n_iter: int
    converged: bool
    noise_source: str
    noise_multiplier: float
    c1: float | None
    clipped_fraction: float | None
    report: Any
    constant_only: bool
    candidate_w: np.ndarray | None = None
    comparison_threshold: float | None = None
    released_statistics: dict | None = None


def released_model(res: FitResult, tau: float, fit_intercept: bool, w=None) -> dict:
    """``res``'s model (or with the standardised coefficients ``w``) as public arrays (:func:`.statistics.
    released_model`)."""
    return fs.released_model(basis=res.basis, score_scale=res.score_scale, clip=res.score_clip,
                             w=res.w if w is None else w, y_loc=res.response_location, y_scale=res.response_scale,
                             y_range=res.y_range, dp_constant=res.dp_constant, fit_intercept=fit_intercept, tau=tau,
                             band=BAND)


def fit(params: FunctionalParams, data: Curves, backend: Any = "inprocess", *, random_state: Any = None,
        noise_seed: int | None = None, callbacks: Sequence[Callable] = (),
        transcript: Callable | None = None) -> FitResult:
    """Fit ``params`` on ``data``: two protocol runs over the same workers (the pooled statistics, then F-ADMM /
    FDP-ADMM on standardised data), and in a private fit the comparison with the DP constant. With a total budget
    and n·ε below the public floor, the whole budget goes to the DP τ-quantile instead (no ADMM).
    ``random_state``: the curves' split over the workers; ``noise_seed``: a seeded simulation's noise (None: each
    worker's own OS entropy). ``transcript(run, round, sender, receiver, message, kind)`` sees every message."""
    X, y, grid = data.X, data.y, data.grid
    n, T = X.shape
    params.check_sizes(n, T)
    mcfg = dict(functional_rules.METHODS[params.method])
    L = int(params.max_iter or mcfg["iterations"])
    private = params.private
    c1 = float(params.c1 if params.c1 is not None else mcfg["c1"])
    eta0 = float(params.eta0 if params.eta0 is not None else mcfg["eta0"])
    parts, parts_y = ff.split_workers(X, y, params.workers, check_random_state(random_state))
    if params.constant_only(n):
        return _constant_only(params, parts, parts_y, data, noise_seed, backend, transcript)
    budget = ff.calibrate(epsilon=params.epsilon, total_epsilon=params.total_epsilon, delta=params.delta,
                          accountant=params.accountant, L=L, shares=params.shares(L, n), private=private,
                          y_range=params.y_range, curve_clip=params.curve_clip)
    z = budget.z
    pooled = ff.pooled_statistics(parts, parts_y, grid, n_components=params.n_components, kind=params.basis_kind,
                                  y_range=params.y_range, curve_clip=params.curve_clip, tau=params.tau,
                                  z_stats=budget.z_stats, z_quantile=budget.z_quantile, nseed=noise_seed,
                                  backend=backend, transcript=transcript)
    basis, y_loc, y_scale, stats = pooled.basis, pooled.y_loc, pooled.y_scale, pooled.state
    if not params.fit_intercept:  # no intercept to absorb a shift: scale the response only
        y_scale, y_loc = math.sqrt(y_scale * y_scale + y_loc * y_loc), 0.0
    scale = ff.score_scale(basis, mcfg["standardize"], pooled.var_floor)
    clip = c1 if private else None  # clipping is a privacy precondition; non-private fits use the raw scores
    c_total = math.sqrt(c1 * c1 + 1.0) if params.fit_intercept else c1
    settings = functional_messages.Settings.make([params.tau], lam=params.lam, noise_multiplier=z,
                                                 eps_iter=budget.eps_iter, delta_iter=budget.delta_iter)
    monitor = (not private) if params.monitor is None else bool(params.monitor)
    clipped = None
    if clip is None:
        clipped = 0.0
    elif monitor:  # opt-in monitoring: a pooled count the guarantee does not cover
        clipped = sum(int(np.sum(np.linalg.norm(basis.scores(Xi) / scale, axis=1) > c1)) for Xi in parts) / n
    result = ff.run_admm(parts, parts_y, basis=basis, scale=scale, y_loc=y_loc, y_scale=y_scale, clip=clip,
                         settings=settings, method=mcfg, L=L, rho=params.rho, penalty=params.penalty,
                         l1_ratio=params.l1_ratio, fit_intercept=params.fit_intercept, c_total=c_total, c2=params.c2,
                         c_w=params.c_w, eta0=eta0, nseed=noise_seed, backend=backend, callbacks=callbacks,
                         monitor=monitor, transcript=transcript)
    w = np.array(result.hub_state.output[0, 0], dtype=float)
    if private:  # predictions never leave the public (or DP-estimated) response range
        y_range = (float(stats.y_range[0]), float(stats.y_range[1]))
    elif params.y_range is not None:
        y_range = (float(params.y_range[0]), float(params.y_range[1]))
    else:
        y_range = (-math.inf, math.inf)
    res = FitResult(basis, w, w, 0.0, w, y_loc, y_scale, scale, clip, y_range,
                    float(stats.sums["quantile"]) if private else None, None, None,
                    History(result.history, monitored=monitor, private=private), result.rounds,
                    bool(result.converged), result.noise_source, z, c_total, clipped, None, False,
                    released_statistics={"sums": stats.sums, "y_range": stats.y_range, "curve_clip": stats.curve_clip})
    compare_ledger = None
    if private:
        res.candidate_w = w.copy()  # the ADMM's model (post-processing of released messages)
        model = released_model(res, params.tau, params.fit_intercept) | {"constant": res.dp_constant}
        handed = ff.hand_over(parts, parts_y, grid, model, w, y_loc=y_loc, y_scale=y_scale,
                              fit_intercept=params.fit_intercept, budget=budget, margin=COMPARE_MARGIN,
                              nseed=noise_seed, backend=backend, transcript=transcript)
        w, res.fallback, compare_ledger = handed.w, handed.fallback, handed.ledger
        res.comparison, res.comparison_threshold = handed.comparison, handed.threshold
    res.w = w
    res.coef = y_scale * w[: basis.n_components] / scale
    res.intercept = float(y_loc + y_scale * w[-1]) if params.fit_intercept else float(y_loc)
    res.beta = basis.curve(res.coef)
    if private:
        res.report = fit_report(
            [pooled.ledger, result.ledger, compare_ledger], delta=float(params.delta), accountant=params.accountant,
            eps_iter=budget.eps_iter, delta_iter=budget.delta_iter, rounds=result.rounds, z=z,
            shares=params.shares(L, n), quantile_steps=fs.QUANTILE_STEPS, c1=c1, c_total=c_total,
            fit_intercept=params.fit_intercept, clipped_fraction=clipped, curve_clip=stats.curve_clip,
            centered_clip=stats.sums["centered_clip"], curve_clip_given=params.curve_clip is not None,
            y_range=params.y_range, basis_kind=params.basis_kind, tau=params.tau, method=params.method,
            handed_over=res.fallback, monitor=monitor, noise_source=result.noise_source)
    return res


def _constant_only(params: FunctionalParams, parts, parts_y, data: Curves, noise_seed, backend,
                   transcript) -> FitResult:
    """Too few curves for the budget (n·ε below the public floor): the whole budget goes to the DP τ-quantile (B
    bisection counts, after the response histogram if no public range), handed over as the model; no ADMM run (at
    this size its noise swamps any signal — the benchmark's finding)."""
    res, z, n_ranges = ff.run_constant_only(parts, parts_y, data.grid, y_range=params.y_range, tau=params.tau,
                                            total_epsilon=params.total_epsilon, delta=params.delta,
                                            accountant=params.accountant, nseed=noise_seed, backend=backend,
                                            transcript=transcript)
    st = res.hub_state
    K = int(params.n_components)
    basis = F.bspline_basis(data.grid, K)  # fixed functions (no data): keeps the model's interface
    constant = float(st.sums["quantile"])
    report = constant_only_report(res.ledger, delta=float(params.delta), accountant=params.accountant,
                                  n_epsilon=data.X.shape[0] * float(params.total_epsilon),
                                  min_n_epsilon=params.n_epsilon_floor, n_ranges=n_ranges, z=z, tau=params.tau,
                                  quantile_steps=fs.QUANTILE_STEPS, y_range=params.y_range,
                                  noise_source=res.noise_source)
    return FitResult(basis, np.zeros(K + 1), np.zeros(K), constant, basis.curve(np.zeros(K)), constant, 1.0,
                     np.ones(K), None, (float(st.y_range[0]), float(st.y_range[1])), constant, "dp-constant", None,
                     {}, 0, False, res.noise_source, z, None, None, report, True)


__all__ = ["Curves", "FitResult", "fit", "released_model"]
