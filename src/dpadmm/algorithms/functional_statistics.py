"""Pooled statistics of distributed functional quantile regression, released privately [Zhou; SPEC §3].

Before FDP-ADMM runs, the central machine needs a basis, the mean curve for centring, the scores'
scales and the response's location and scale — every one of them a function of *all* workers' data
(the paper is silent on how to obtain them). Each is released here through an accounted Gaussian
mechanism by the worker that holds the data, with noise from the worker's own generator; the hub
only sums what it receives (post-processing). Non-private fits run the same protocol with no noise.

Stages (one engine round each; the hub decides which are needed):

1. ``ranges`` (private fits without a public range): worker i releases two histograms of
   data-independent bins, ``h_y`` over ``asinh(y_ij)`` (width 0.1 on [−30, 30], out-of-range values
   in the end bins; asinh is a signed log, so the bins suit any unit) and ``h_x`` over ``log ‖x̃_ij‖``
   (width ≈ 0.5 on [log 1e−12, log 1e12]), plus N(0, σ² I) on every bin. The bins are coarse on purpose:
   a bin must hold enough curves to stand out of the noise, and stage 2 refines the response's scale.
   Sensitivity: replacing one (curve, response) pair moves one count of each histogram down by 1 and
   one up by 1 — four entries by 1 — so Δ₂ = 2 (√2 when only one histogram is released). Enforced by
   construction (counts of fixed bins; every value lands in exactly one bin).
   The hub keeps the bins whose pooled noisy count exceeds ``THRESHOLD``·σ·√M (a false bin survives
   with probability < 1e−5 each), and reads off a response range [lo, hi] (the 1st and 99th percentile
   bin edges; a coarse range, refined in stage 2) and a curve clipping radius c_X (the 95th percentile
   bin's upper edge). Too few curves for any bin to survive raises
   :class:`~dpadmm.exceptions.PrivacyPreconditionError` naming the public alternatives.
2. ``mean`` (private fits): worker i clips its (projected) curves z_j = clip(Uᵀ x̃_j, c_X) (U: identity
   for FPCA on the grid, the orthonormal basis Q^{1/2}Φ for a fixed basis, so ‖z_j‖ ≤ ‖x̃_j‖) and its
   responses v_j = (clip(y_j, lo, hi) − c)/r (c, r the range's centre and half-width, |v_j| ≤ 1), and
   releases ``(Σ_j z_j/c_X, Σ_j v_j, Σ_j v_j², Σ_j ‖z_j‖²/c_X²)`` + N(0, σ² I). One replaced pair moves
   the four parts by at most 2, 2, 1, 1: Δ₂ = √10 (enforced by the two clips). The hub gets the mean
   μ̂ of z, the response's location a and scale b (mean and standard deviation of the clipped
   response, the latter floored at r/20) and the spread s² = E‖z‖² − ‖μ̂‖² of the curves about
   their mean, and sets the centred radius c₂ = 3s.
3. ``moments``: worker i releases the moment sum of its centred, clipped curves
   ``S_i = Σ_j (c₂, u_j)(c₂, u_j)ᵀ``, ``u_j = clip(z_j − μ̂, c₂)``, plus a symmetric Gaussian matrix
   (i.i.d. upper triangle). ‖(c₂, u)‖² ≤ 2c₂², so replacing one u moves S_i by at most 4c₂² in
   Frobenius norm (= ℓ2 of the upper triangle, which carries the information): Δ₂ = 4c₂², scale-free
   (curves far from zero no longer inflate it: their level went into stage 2, at sensitivity 2 c_X).
   The hub reads the residual mean and the covariance of the centred curves → FPCA basis or the fixed
   basis' score scales, and the mean curve μ̂ + residual mean.
   Non-private fits run stage 3 alone on the raw curves (exact sums, plus the response sums n, Σy, Σy²).

Composition: one replaced pair of worker i changes only worker i's releases; everything every other
worker computes afterwards (its scores, its ADMM messages) depends on worker i's data only through
the hub's sums of *noisy* releases, i.e. by post-processing. So worker i's guarantee composes its own
releases here with its own L ADMM releases (the engine's ledger holds both; ``privacy.zhou`` composes
per worker and reports the worst), and the run's ε is that worker's.

| symbol | code |
|--------|------|
| x̃_ij = Q^{1/2} x_ij | ``fpca.scale_curves`` |
| c_X | ``StatsRequest.curve_clip`` |
| U | ``StatsRequest.projection`` (None: identity) |
| z = σ/Δ | ``StatsConfig.noise_multiplier`` |
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, NamedTuple

import numpy as np

from ..kernels import fpca as F
from ..privacy.events import RECORD_REPLACE, GaussianRelease

Y_EDGES = np.linspace(-30.0, 30.0, 61)  # asinh(y) bins of width 1 (|y| up to ~5e12): coarse, so few curves suffice
X_EDGES = np.linspace(math.log(1e-12), math.log(1e12), 111)  # log ||x~|| bins of width ~0.5
THRESHOLD = 4.5  # pooled noisy count must exceed THRESHOLD · sigma · sqrt(M) to count as occupied
Y_QUANTILES = (0.01, 0.99)
X_QUANTILE = 0.95


@dataclass(frozen=True, eq=False)
class StatsConfig:
    """What a worker holds for the statistics stages (its curves and responses never leave it)."""

    name: str
    X: np.ndarray  # (m, T) curves on the grid
    y: np.ndarray  # (m,)
    q: np.ndarray  # (T,) quadrature weights
    noise_multiplier: float = 0.0  # z = sigma / sensitivity; 0: exact (non-private)


class StatsRequest(NamedTuple):
    """Hub → workers: which statistic to release, with its public parameters."""

    stage: str  # "ranges" | "mean" | "moments" | "done"
    y_hist: bool = True
    x_hist: bool = True
    curve_clip: float | None = None
    projection: np.ndarray | None = None  # (T, J) with orthonormal columns, or None
    y_range: tuple[float, float] | None = None  # coarse public range for the clipped response sums
    center: np.ndarray | None = None  # μ̂ (projected/scaled space), subtracted before the moment sum


class StatsMessage(NamedTuple):
    """Workers → hub: the (noisy) statistic of the requested stage."""

    stage: str
    values: dict


def setup_stats(name: str, X, y, q, noise_multiplier: float):
    """Worker-side setup (``PartySpec.setup``)."""
    return StatsConfig(name, np.asarray(X, float), np.asarray(y, float), np.asarray(q, float),
                       float(noise_multiplier)), None


def _hist(values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    idx = np.clip(np.searchsorted(edges, values, side="right") - 1, 0, edges.size - 2)
    return np.bincount(idx, minlength=edges.size - 1).astype(float)


def stats_step(cfg: StatsConfig, state, inbox: StatsRequest, *, rng: np.random.Generator):
    """Release the requested statistic with Gaussian noise of scale z·Δ (see the module docstring)."""
    z = cfg.noise_multiplier
    events = []
    values: dict = {}
    if inbox.stage == "ranges":
        parts = []
        if inbox.y_hist:
            values["y_hist"] = _hist(np.arcsinh(cfg.y), Y_EDGES)
            parts.append("y_hist")
        if inbox.x_hist:
            norms = np.linalg.norm(F.scale_curves(cfg.X, cfg.q), axis=1)
            values["x_hist"] = _hist(np.log(np.maximum(norms, 1e-300)), X_EDGES)
            parts.append("x_hist")
        sens = math.sqrt(2.0 * len(parts))  # each histogram: one count −1, one +1
        if z > 0:
            sigma = z * sens
            for k in parts:
                values[k] = values[k] + sigma * rng.standard_normal(values[k].shape)
            events.append(GaussianRelease(cfg.name, -2, sens, sigma, RECORD_REPLACE))
    elif inbox.stage == "mean":
        Z = F.scale_curves(cfg.X, cfg.q)
        if inbox.projection is not None:
            Z = Z @ inbox.projection
        cx = float(inbox.curve_clip)
        Zc = F.clip_rows(Z, cx)  # ‖z_j‖ ≤ c_X
        lo, hi = inbox.y_range
        c, r = 0.5 * (lo + hi), 0.5 * (hi - lo)
        v = (np.clip(cfg.y, lo, hi) - c) / r  # |v_j| ≤ 1
        vec = np.concatenate([Zc.sum(0) / cx, [v.sum(), (v * v).sum(), (Zc * Zc).sum() / (cx * cx)]])
        sens = math.sqrt(10.0)
        values["mean"] = vec + z * sens * rng.standard_normal(vec.shape)
        events.append(GaussianRelease(cfg.name, -2, sens, z * sens, RECORD_REPLACE))
    elif inbox.stage == "moments":
        Z = F.scale_curves(cfg.X, cfg.q)
        if inbox.projection is not None:
            Z = Z @ inbox.projection
        if z > 0:
            c2 = float(inbox.curve_clip)
            U = F.clip_rows(Z - inbox.center, c2)  # ‖u_j‖ ≤ c₂: the premise of Δ = 4c₂²
            S = F.moment_sum(U, np.ones(U.shape[1]))
            S[0, :] *= c2  # rows of (c₂, u_j): ‖·‖² ≤ 2c₂²
            S[:, 0] *= c2
            sens = 4.0 * c2 * c2
            values["S"] = F.noisy_moment_sum(S, z * sens, rng)
            events.append(GaussianRelease(cfg.name, -1, sens, z * sens, RECORD_REPLACE))
        else:  # non-private: exact sums, response included
            values["S"] = F.moment_sum(Z, np.ones(Z.shape[1]))
            values["y_sums"] = np.array([cfg.y.size, cfg.y.sum(), (cfg.y * cfg.y).sum()])
    return state, StatsMessage(inbox.stage, values), events


# ----------------------------------------------------------------------------- hub
@dataclass(frozen=True, eq=False)
class StatsHubConfig:
    """The stages to run and their public inputs."""

    party_names: tuple[str, ...]
    noise_multiplier: float
    y_range: tuple[float, float] | None = None  # public response range (no y histogram needed)
    curve_clip: float | None = None  # public curve radius (no norm histogram needed)
    projection: np.ndarray | None = None
    n_total: int = 0  # Σ m_i (public)


class StatsHubState(NamedTuple):
    stage: str
    y_range: tuple[float, float] | None
    curve_clip: float | None
    sums: dict


def _first_request(cfg: StatsHubConfig) -> StatsRequest:
    private = cfg.noise_multiplier > 0
    need_y = private and cfg.y_range is None
    need_x = private and cfg.curve_clip is None
    if need_y or need_x:
        return StatsRequest("ranges", y_hist=need_y, x_hist=need_x)
    if private:
        return StatsRequest("mean", curve_clip=cfg.curve_clip, projection=cfg.projection, y_range=cfg.y_range)
    return StatsRequest("moments", projection=cfg.projection)


def stats_rounds(cfg: StatsHubConfig) -> int:
    """Number of engine rounds (= Gaussian releases per worker when private): 3, 2 (public bounds) or 1."""
    if cfg.noise_multiplier <= 0:
        return 1
    return 3 if _first_request(cfg).stage == "ranges" else 2


def init_stats_hub(cfg: StatsHubConfig):
    req = _first_request(cfg)
    st = StatsHubState(req.stage, cfg.y_range, cfg.curve_clip, {})
    return st, {p: req for p in cfg.party_names}


def _occupied(hist: np.ndarray, sigma_pooled: float) -> np.ndarray:
    """Pooled noisy counts, bins below the detection threshold set to 0."""
    return np.where(hist > THRESHOLD * sigma_pooled, hist, 0.0)


def _quantile_edges(counts: np.ndarray, edges: np.ndarray, qs) -> list[tuple[float, float]]:
    cum = np.cumsum(counts) / counts.sum()
    out = []
    for qv in qs:
        i = int(min(np.searchsorted(cum, qv, side="left"), counts.size - 1))
        out.append((float(edges[i]), float(edges[i + 1])))
    return out


def ranges_from_histograms(y_hist, x_hist, sigma_pooled: float):
    """(y_range, curve_clip) from pooled noisy histograms (post-processing); None where a histogram is
    absent; raises ValueError naming the histogram when no bin is occupied."""
    y_range = clip = None
    if y_hist is not None:
        occ = _occupied(y_hist, sigma_pooled)
        if occ.sum() <= 0:
            raise ValueError("y")
        (lo, _), (_, hi) = _quantile_edges(occ, Y_EDGES, Y_QUANTILES)
        y_range = (float(np.sinh(lo)), float(np.sinh(hi)))

    if x_hist is not None:
        occ = _occupied(x_hist, sigma_pooled)
        if occ.sum() <= 0:
            raise ValueError("x")
        ((_, hi),) = _quantile_edges(occ, X_EDGES, (X_QUANTILE,))
        clip = float(math.exp(hi))
    return y_range, clip


def mean_and_spread(values: np.ndarray, n: float, y_range: tuple[float, float], curve_clip: float):
    """Post-processing of the pooled ``mean`` release: (μ̂ of z, response location, response scale,
    centred radius c₂ = 3·spread), with the noisy second moments floored."""
    lo, hi = y_range
    c, r = 0.5 * (lo + hi), 0.5 * (hi - lo)
    cx = float(curve_clip)
    mu = values[:-3] * cx / n
    m1 = float(np.clip(values[-3] / n, -1.0, 1.0))
    m2 = float(np.clip(values[-2] / n, 0.0, 1.0))
    y_sd = math.sqrt(max(m2 - m1 * m1, 0.0025))
    ez2 = float(np.clip(values[-1] / n, 0.0, 1.0)) * cx * cx
    spread = math.sqrt(max(ez2 - float(mu @ mu), (0.01 * cx) ** 2))
    return mu, c + r * m1, r * y_sd, 3.0 * spread


def stats_hub_step(cfg: StatsHubConfig, state: StatsHubState, outboxes: Mapping[str, StatsMessage], *, rng):
    """Sum the workers' releases; after ``ranges`` derive the public ranges and ask for ``moments``."""
    total: dict = {}
    for p in cfg.party_names:
        for k, v in outboxes[p].values.items():
            total[k] = total.get(k, 0.0) + v
    sums = dict(state.sums) | total
    if state.stage == "ranges":
        sigma_pooled = cfg.noise_multiplier * math.sqrt(2.0 * (("y_hist" in total) + ("x_hist" in total)))
        sigma_pooled *= math.sqrt(len(cfg.party_names))
        try:
            y_range, clip = ranges_from_histograms(total.get("y_hist"), total.get("x_hist"), sigma_pooled)
        except ValueError as exc:
            y_range, clip = (None, None)
            sums["failed"] = str(exc)
        y_range = cfg.y_range if cfg.y_range is not None else y_range
        clip = cfg.curve_clip if cfg.curve_clip is not None else clip
        req = StatsRequest("mean", curve_clip=clip, projection=cfg.projection, y_range=y_range) \
            if "failed" not in sums else StatsRequest("done")
        return StatsHubState(req.stage, y_range, clip, sums), {p: req for p in cfg.party_names}, []
    if state.stage == "mean":
        n = float(cfg.n_total)
        mu, a, b, c2 = mean_and_spread(total["mean"], n, state.y_range, state.curve_clip)
        sums["center"], sums["response"], sums["centered_clip"] = mu, (a, b), c2
        req = StatsRequest("moments", curve_clip=c2, projection=cfg.projection, center=mu)
        return StatsHubState("moments", state.y_range, state.curve_clip, sums), {p: req for p in cfg.party_names}, []
    return StatsHubState("done", state.y_range, state.curve_clip, sums), \
        {p: StatsRequest("done") for p in cfg.party_names}, []


# ----------------------------------------------------------------------------- protocol (as data, for the network)
def _is_private(cfg: StatsConfig) -> bool:
    return cfg.noise_multiplier > 0


def _protocol():
    from ..protocol import Protocol
    from .policies import STATISTICS

    return Protocol("functional-statistics", setup_stats, stats_step, None, handlers={},
                    types=(StatsRequest, StatsMessage), private=_is_private, data_args=(1, 2),
                    policy=STATISTICS)


PROTOCOL = _protocol()
