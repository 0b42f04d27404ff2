"""The runs of a functional quantile regression fit [Zhou]: the noise calibration (ε → z, once: :func:`calibrate`,
:func:`run_constant_only`), the pooled statistics (basis, centring, scales, the DP τ-quantile), F-ADMM / FDP-ADMM
over the workers, and the model-vs-constant comparison — each a run of the fit runner on a fresh backend, with its
own noise stream in a seeded simulation.

Part of the folder's driver (:mod:`.driver` chains these stages; ``tests/unit/test_architecture.py`` lets
``driver*`` modules import the engine, the backends and the fit runner); the accounting is :mod:`.report`'s.
A spy or a plant on a worker's setup or step goes on this module's ``PROTOCOL``/``STATISTICS_PROTOCOL``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence

import numpy as np

from ... import engine
from ...backends import PartySpec, get_backend
from ...exceptions import PrivacyPreconditionError
from ...fit import runner
from ...kernels import fpca as F
from . import hub as functional_hub, messages as functional_messages, rules as functional_rules
from . import statistics as functional_statistics, statistics_hub as functional_statistics_hub
from .messages import FunctionalOptions, Setup
from .protocol import PROTOCOL, STATISTICS_PROTOCOL
from .report import calibrate_total, iteration_noise_multiplier
from .report import total_epsilon as total_epsilon_of
from .statistics import StatsSetup


def _seed(nseed, stream: int):
    """The noise seed of one of the fit's runs (statistics 7, comparison 11; the ADMM run uses ``nseed``)."""
    return None if nseed is None else int(np.random.SeedSequence([int(nseed), stream]).generate_state(1)[0])


def _tap(transcript, run: str):
    return None if transcript is None else (lambda *a: transcript(run, *a))


# ----------------------------------------------------------------------------- noise calibration
class Budget(NamedTuple):
    """The noise of a fit: z of one ADMM round, the per-iteration (ε, δ) it stands for, the one-shot statistics
    per worker (``n_stats``), their budget shares (W_s, W_q, W_c) and the multipliers of each stage."""

    z: float
    eps_iter: float
    delta_iter: float
    n_stats: int
    shares: tuple
    z_stats: float
    z_quantile: float
    z_compare: float


def multipliers(z: float, L: int, n_stats: int, W: tuple[int, int, int], B: int) -> list[float]:
    """Every Gaussian release of one worker, as noise multipliers: L ADMM rounds at z, the one-shot
    statistics at z/√W_s, the comparison at z/√W_c, the B bisection counts at z·√(B/W_q)."""
    Ws, Wq, Wc = W
    return [z] * L + [z / math.sqrt(Ws)] * n_stats + [z / math.sqrt(Wc)] + [z * math.sqrt(B / Wq)] * B


def calibrate(*, epsilon, total_epsilon, delta: float, accountant: str, L: int, shares: tuple, private: bool,
              y_range, curve_clip) -> Budget:
    """Budget shares, in units of one ADMM round at z: each one-shot statistic (ranges, mean, moments), the DP
    τ-quantile (B bisection counts together) and the model-vs-constant comparison get W rounds' worth with a total
    budget (a Gaussian release at z/√W composes exactly like W at z); with a per-iteration ε (the paper's
    convention) every release is at the iteration's z (W = 1)."""
    Ws, Wq, Wc = shares
    B = functional_statistics.QUANTILE_STEPS
    n_stats = 0
    if private:
        hub_probe = functional_statistics_hub.StatsHubConfig((), 1.0, y_range=y_range, curve_clip=curve_clip)
        n_stats = functional_statistics_hub.one_shot_releases(hub_probe)  # Gaussian releases per worker before the ADMM rounds
    z = 0.0
    eps_iter, delta_iter = math.inf, 1.0
    if epsilon is not None:
        z = iteration_noise_multiplier(float(epsilon), float(delta))  # [Zhou, Thm 1]
        eps_iter, delta_iter = float(epsilon), float(delta)
    elif total_epsilon is not None:
        z = calibrate_total(float(total_epsilon), float(delta), L, extra_releases=n_stats * Ws + Wq + Wc,
                            accountant=accountant)
        # the shares compose exactly like (n_stats + 2)·W more rounds at z; the accountant's discretisation
        # of the mixed multipliers may differ in the last digits: nudge z up until the actual list fits
        while total_epsilon_of(multipliers(z, L, n_stats, (Ws, Wq, Wc), B), float(delta),
                               accountant) > float(total_epsilon) * (1.0 - 1e-7):
            z *= 1.0 + 1e-6
        eps_iter, delta_iter = math.sqrt(2.0 * math.log(1.25 / delta)) / z, float(delta)
    return Budget(z, eps_iter, delta_iter, n_stats, (Ws, Wq, Wc), z / math.sqrt(Ws), z * math.sqrt(B / Wq),
                  z / math.sqrt(Wc))


# ----------------------------------------------------------------------------- pooled statistics
def stats_specs(parts, parts_y, q, z_stats, z_quantile, z_compare, one_shot) -> list[PartySpec]:
    """One ``functional-statistics`` worker per part; ``one_shot`` (the run's one-shot stages) and the
    multipliers (0: a stage this run does not make) are what a budgeted party prices the run at. The
    ``min_clip`` slot (0.0) is the party's own: its policy overwrites it at Setup."""
    names = [f"worker{i + 1}" for i in range(len(parts))]
    return [PartySpec.of(STATISTICS_PROTOCOL, nm, StatsSetup(
                name=nm, X=Xi, y=yi, q=q, noise_multiplier=z_stats, quantile_multiplier=z_quantile,
                compare_multiplier=z_compare, min_clip=0.0, one_shot=int(one_shot)), owner=nm)
            for nm, Xi, yi in zip(names, parts, parts_y)]


def run_statistics(hub_cfg, specs, backend, nseed, transcript) -> engine.RunResult:
    """One run of the pooled-statistics protocol (``fs.stats_*``) on a fresh backend; its noise stream is apart
    from the ADMM run's, so a seeded simulation never reuses noise."""
    hub = engine.Hub(hub_cfg, functional_statistics_hub.init_stats_hub, functional_statistics_hub.stats_hub_step)
    return runner.run(get_backend(backend), specs, hub, rounds=functional_statistics_hub.stats_rounds(hub_cfg), noise_seed=_seed(nseed, 7),
                      monitor=False, stop_on_convergence=False, transcript=_tap(transcript, "statistics")).result


@dataclass
class Pooled:
    """What the pooled statistics give the ADMM: the basis, the response's location and scale, the floor of the
    score variances (the noise level of a private estimate), the statistics hub's final state and the ledger."""

    basis: F.Basis
    y_loc: float
    y_scale: float
    var_floor: float
    state: object
    ledger: object


def pooled_statistics(parts, parts_y, grid, *, n_components: int, kind: str, y_range, curve_clip, tau: float,
                      z_stats: float, z_quantile: float, nseed, backend, transcript=None) -> Pooled:
    """Run the pooled-statistics protocol (``algorithms.functional_statistics``) over the workers and turn its
    released sums into the basis (``kind``: fpca, private-fpca, fourier, bspline) and the response's scale."""
    K = int(n_components)
    q = F.trapezoid_weights(grid)
    fixed = None
    if kind in ("fourier", "bspline"):
        fixed = F.fourier_basis(grid, K) if kind == "fourier" else F.bspline_basis(grid, K)
    projection = None if fixed is None else fixed.phi * np.sqrt(fixed.q)[:, None]  # U = Q^{1/2}Φ, orthonormal
    names = [f"worker{i + 1}" for i in range(len(parts))]
    y_range = None if y_range is None else (float(y_range[0]), float(y_range[1]))
    hub_cfg = functional_statistics_hub.StatsHubConfig(tuple(names), z_stats, y_range=y_range,
                                curve_clip=None if curve_clip is None else float(curve_clip),
                                projection=projection, n_total=int(sum(v.size for v in parts_y)),
                                tau=float(tau) if z_stats > 0 else None, quantile_multiplier=z_quantile)
    # no comparison in this run (its own run follows the ADMM): the workers hold no multiplier for it
    specs = stats_specs(parts, parts_y, q, z_stats, z_quantile, 0.0, functional_statistics_hub.one_shot_releases(hub_cfg))
    res = run_statistics(hub_cfg, specs, backend, nseed, transcript)
    st = res.hub_state
    if "failed" in st.sums:
        what = {"y": "the response's range (pass y_range=(lo, hi))",
                "x": "the curves' norm (pass curve_clip=C)"}[st.sums["failed"]]
        raise PrivacyPreconditionError(f"too few curves for this budget to estimate {what} privately; give it as "
                                       "a public bound, or use more curves or a larger budget.")
    n = float(sum(v.size for v in parts_y))
    S = np.array(st.sums["S"], dtype=float)
    if z_stats > 0:
        # centred release: S = Σ (c₂, u)(c₂, u)ᵀ about μ̂; rebuild the equivalent uncentred moment sum
        c2 = float(st.sums["centered_clip"])
        resid = S[0, 1:] / (c2 * n)
        cov = S[1:, 1:] / n - np.outer(resid, resid)
        mean = st.sums["center"] + resid
        S = np.empty_like(S)
        S[0, 0] = n
        S[0, 1:] = S[1:, 0] = n * mean
        S[1:, 1:] = n * (cov + np.outer(mean, mean))
        y_loc, y_scale = st.sums["response"]
        # the DP τ-quantile is the response's location: w = 0 (the ADMM's start) is the DP constant
        y_loc = float(st.sums["quantile"])
        # noisy variances below the noise level say nothing: floor them at 3 noise standard deviations
        # of a covariance entry (z·Δ/n, Δ the moment release's sensitivity) so that no score is blown up by a
        # noise-sized divisor
        var_floor = 3.0 * z_stats * functional_statistics.moment_release_sensitivity(c2) / n
    else:
        S[0, 0] = n
        cnt, s1, s2 = st.sums["y_sums"]
        y_loc = s1 / cnt
        var = max(s2 / cnt - y_loc * y_loc, 0.0)
        y_scale = math.sqrt(var) if var > 0 else max(abs(y_loc), 1.0)
        var_floor = 0.0
    if fixed is None:
        basis = F.fpca_from_moments(S, grid, K)
    else:
        mz, Cz = F.moment_covariance(S)
        basis = F.Basis(fixed.grid, fixed.q, fixed.phi, (projection @ mz) / np.sqrt(fixed.q),
                        np.maximum(np.diag(Cz), 0.0), fixed.kind)
    return Pooled(basis, float(y_loc), float(y_scale), var_floor, st, res.ledger)


def score_scale(basis: F.Basis, how: str, var_floor: float = 0.0) -> np.ndarray:
    """Divisors of the scores: their standard deviations (``each``) or the largest one (``common``);
    variances floored at ``var_floor`` (the noise level of a private estimate)."""
    sd = np.sqrt(np.maximum(basis.eigenvalues, var_floor))
    top = float(sd.max()) if sd.size and sd.max() > 0 else 1.0
    if how == "common":
        return np.full(sd.shape, top)
    return np.maximum(sd, 1e-6 * top)


def run_constant_only(parts, parts_y, grid, *, y_range, tau: float, total_epsilon: float, delta: float,
                      accountant: str, nseed, backend, transcript=None):
    """Too few curves for the budget: the whole budget on the DP τ-quantile (B bisection counts, after the
    response histogram if no public range). Returns (the statistics run, z, the number of range releases)."""
    B = functional_statistics.QUANTILE_STEPS
    names = [f"worker{i + 1}" for i in range(len(parts))]
    y_range = None if y_range is None else (float(y_range[0]), float(y_range[1]))
    probe = functional_statistics_hub.StatsHubConfig((), 1.0, y_range=y_range, tau=float(tau), constant_only=True)
    n_ranges = functional_statistics_hub.one_shot_releases(probe)
    z = calibrate_total(float(total_epsilon), float(delta), B, extra_releases=n_ranges, accountant=accountant)
    q = F.trapezoid_weights(grid)
    specs = stats_specs(parts, parts_y, q, z, z, 0.0, n_ranges)
    hub_cfg = functional_statistics_hub.StatsHubConfig(tuple(names), z, y_range=y_range, n_total=int(sum(v.size for v in parts_y)),
                                tau=float(tau), quantile_multiplier=z, constant_only=True)
    res = run_statistics(hub_cfg, specs, backend, nseed, transcript)
    if "failed" in res.hub_state.sums:
        raise PrivacyPreconditionError("too few curves for this budget to estimate the response's range "
                                       "privately; give it as a public bound (y_range=(lo, hi), --y-range).")
    return res, z, n_ranges


# ----------------------------------------------------------------------------- F-ADMM / FDP-ADMM
def run_admm(parts, parts_y, *, basis, scale, y_loc: float, y_scale: float, clip, settings, method: dict, L: int,
             rho: float, penalty: str, l1_ratio: float, fit_intercept: bool, c_total: float, c2: float, c_w: float,
             eta0: float, nseed, backend, callbacks: Sequence[Callable] = (), monitor: bool = False,
             transcript=None) -> engine.RunResult:
    """L rounds of F-ADMM / FDP-ADMM (``method``: one of ``fq.METHODS``) with one party per worker; each worker
    turns its own curves into clipped, standardised scores inside its process (its setup, under the runner's BLAS
    cap)."""
    M = len(parts)
    names = [f"worker{i + 1}" for i in range(M)]
    decay_start = L * (1.0 - method["average_last"]) if method["average_last"] > 0 else math.inf
    specs = []
    for name, Xi, yi in zip(names, parts, parts_y):
        opts = FunctionalOptions(
            rho=float(rho), n_workers=M, penalty=penalty, l1_ratio=float(l1_ratio), fit_intercept=bool(fit_intercept),
            local_step=method["local_step"], step=method["step"], c1=c_total, c2=float(c2), c_w=float(c_w), eta0=eta0,
            decay_start=decay_start, worker_names=(name,),
            smooth=functional_rules.smooth_schedule(method.get("smooth", (0.0, 1.0, 0.0)), L, method["average_last"]))
        specs.append(PartySpec.of(PROTOCOL, name, Setup(name=name, X=Xi, y=yi, basis=basis, score_scale=scale,
                                                        y_loc=y_loc, y_scale=y_scale, clip=clip, settings=settings,
                                                        options=opts), owner=name))
    Kp = basis.n_components + (1 if fit_intercept else 0)
    hub_cfg = functional_messages.HubConfig(float(rho), tuple(names), (1, 1, Kp), average_last=method["average_last"], rounds=L,
                           tol=float(method["tol"]), adapt_rho=bool(method["adapt_rho"]))
    hub = engine.Hub(hub_cfg, functional_hub.init_hub, functional_hub.hub_step, functional_hub.hub_metrics)
    return runner.run(get_backend(backend), specs, hub, rounds=L, noise_seed=nseed, callbacks=callbacks,
                      monitor=monitor, stop_on_convergence=method["tol"] > 0,
                      transcript=_tap(transcript, "admm")).result


def compare(parts, parts_y, grid, model: dict, *, z_stats: float, z_compare: float, nseed, backend,
            transcript=None) -> tuple[float, object]:
    """The ``compare`` stage (``algorithms.functional_statistics``): the pooled noisy sum of the workers'
    training pinball-loss differences, model − DP constant (clipped, range units). Returns (sum, ledger)."""
    q = F.trapezoid_weights(grid)
    specs = stats_specs(parts, parts_y, q, z_stats, 0.0, z_compare, 0)  # the comparison only
    names = tuple(sp.name for sp in specs)
    hub_cfg = functional_statistics_hub.StatsHubConfig(names, z_stats, compare=model, n_total=int(sum(v.size for v in parts_y)))
    hub = engine.Hub(hub_cfg, functional_statistics_hub.init_stats_hub, functional_statistics_hub.stats_hub_step)
    res = runner.run(get_backend(backend), specs, hub, rounds=1, noise_seed=_seed(nseed, 11), monitor=False,
                     stop_on_convergence=False, transcript=_tap(transcript, "compare")).result
    return float(res.hub_state.sums["difference"][0]), res.ledger


class HandOver(NamedTuple):
    """The model-vs-DP-constant decision of a private fit: the handed-over standardised model ``w``, which one
    (``"model"`` or ``"dp-constant"``), the comparison's noisy sum, its public threshold and the comparison's
    ledger."""

    w: np.ndarray
    fallback: str
    comparison: float
    threshold: float
    ledger: object


def hand_over(parts, parts_y, grid, model: dict, w, *, y_loc: float, y_scale: float, fit_intercept: bool,
              budget: Budget, margin: float, nseed, backend, transcript=None) -> HandOver:
    """Run the comparison of the ADMM's ``model`` (with its ``"constant"``, the DP τ-quantile) and hand over the
    model only if the noisy sum is below −``margin`` pooled noise sds (public: z_c, κ, M): a model no better than
    the DP constant is handed over with probability ≤ Φ(−margin) (2.3% at 2); else the DP constant."""
    diff, ledger = compare(parts, parts_y, grid, model, z_stats=budget.z_stats, z_compare=budget.z_compare,
                           nseed=nseed, backend=backend, transcript=transcript)
    sd = budget.z_compare * functional_statistics.compare_sensitivity(model) * math.sqrt(len(parts))
    threshold = -margin * sd
    if diff < threshold:
        return HandOver(w, "model", diff, threshold, ledger)
    w = np.zeros_like(w)
    w[-1] = (model["constant"] - y_loc) / y_scale if fit_intercept else 0.0
    return HandOver(w, "dp-constant", diff, threshold, ledger)


def split_workers(X, y, workers: int, seed: np.random.SeedSequence) -> tuple[list, list]:
    """The curves split at random over ``workers`` (as evenly as possible; public, data-independent)."""
    rng = np.random.default_rng(seed.spawn(1)[0])  # the split only
    idx = [np.sort(i) for i in np.array_split(rng.permutation(X.shape[0]), int(workers))]
    return [X[i] for i in idx], [y[i] for i in idx]


__all__ = ["Budget", "HandOver", "hand_over", "split_workers", "Pooled", "calibrate", "compare", "multipliers", "pooled_statistics", "run_admm",
           "run_constant_only", "run_statistics", "score_scale", "stats_specs"]
