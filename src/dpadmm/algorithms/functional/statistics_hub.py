"""Pooled statistics of functional quantile regression, the hub's side: which stage to request next, and what the
pooled noisy releases give (ranges, mean and spread, moments, quantile bisection, the comparison) — post-processing
only. The workers' side and the proofs: :mod:`.statistics`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, NamedTuple

import numpy as np

from .statistics import (
    QUANTILE_STEPS, THRESHOLD, X_EDGES, X_QUANTILE, Y_EDGES, Y_QUANTILES, StatsMessage, StatsRequest,
)


@dataclass(frozen=True, eq=False)
class StatsHubConfig:
    """The stages to run and their public inputs."""

    party_names: tuple[str, ...]
    noise_multiplier: float
    y_range: tuple[float, float] | None = None  # public response range (no y histogram needed)
    curve_clip: float | None = None  # public curve radius (no norm histogram needed)
    projection: np.ndarray | None = None
    n_total: int = 0  # Σ m_i (public)
    tau: float | None = None  # private fits: the level of the DP τ-quantile (stage ``quantile``); None: skip it
    quantile_steps: int = QUANTILE_STEPS
    compare: dict | None = None  # a ``compare`` run: the released model (no other stage)
    quantile_multiplier: float = 0.0  # z_q (the hub's threshold σ for the pooled count is not needed)
    constant_only: bool = False  # private, too few curves for the budget: (ranges →) the DP τ-quantile only


class StatsHubState(NamedTuple):
    stage: str
    y_range: tuple[float, float] | None
    curve_clip: float | None
    sums: dict


def _first_request(cfg: StatsHubConfig) -> StatsRequest:
    if cfg.compare is not None:
        return StatsRequest("compare", model=cfg.compare)
    private = cfg.noise_multiplier > 0
    need_y = private and cfg.y_range is None
    need_x = private and cfg.curve_clip is None and not cfg.constant_only
    if cfg.constant_only and not need_y:
        lo, hi = cfg.y_range
        return StatsRequest("quantile", threshold=0.5 * (lo + hi))
    if need_y or need_x:
        return StatsRequest("ranges", y_hist=need_y, x_hist=need_x)
    if private:
        return StatsRequest("mean", curve_clip=cfg.curve_clip, projection=cfg.projection, y_range=cfg.y_range)
    return StatsRequest("moments", projection=cfg.projection)


def stats_rounds(cfg: StatsHubConfig) -> int:
    """Number of engine rounds: 1 (non-private, or a ``compare`` run); private: ranges (unless both bounds
    are public), mean, the bisection rounds of the DP τ-quantile (when ``tau`` is set) and moments."""
    if cfg.compare is not None or cfg.noise_multiplier <= 0:
        return 1
    q = int(cfg.quantile_steps) if cfg.tau is not None else 0
    if cfg.constant_only:
        return q + (1 if _first_request(cfg).stage == "ranges" else 0)
    return (3 if _first_request(cfg).stage == "ranges" else 2) + q


def one_shot_releases(cfg: StatsHubConfig) -> int:
    """Gaussian releases per worker at ``noise_multiplier`` (ranges?, mean, moments); the bisection
    counts are accounted separately (at ``quantile_multiplier``)."""
    if cfg.noise_multiplier <= 0:
        return 0
    if cfg.constant_only:
        return 1 if _first_request(cfg).stage == "ranges" else 0
    return 3 if _first_request(cfg).stage == "ranges" else 2


def init_stats_hub(cfg: StatsHubConfig):
    req = _first_request(cfg)
    sums = {"bisect": (float(cfg.y_range[0]), float(cfg.y_range[1]), 0)} if req.stage == "quantile" else {}
    st = StatsHubState(req.stage, cfg.y_range, cfg.curve_clip, sums)
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
    sums = dict(state.sums) | {k: v for k, v in total.items() if k != "count"}
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
        if cfg.constant_only and "failed" not in sums:
            sums["bisect"] = (float(y_range[0]), float(y_range[1]), 0)
            req = StatsRequest("quantile", threshold=0.5 * (y_range[0] + y_range[1]))
            return StatsHubState("quantile", y_range, clip, sums), {p: req for p in cfg.party_names}, []
        req = StatsRequest("mean", curve_clip=clip, projection=cfg.projection, y_range=y_range) \
            if "failed" not in sums else StatsRequest("done")
        return StatsHubState(req.stage, y_range, clip, sums), {p: req for p in cfg.party_names}, []
    if state.stage == "mean":
        n = float(cfg.n_total)
        mu, a, b, c2 = mean_and_spread(total["mean"], n, state.y_range, state.curve_clip)
        sums["center"], sums["response"], sums["centered_clip"] = mu, (a, b), c2
        if cfg.tau is not None:  # DP τ-quantile by noisy bisection over the range
            lo, hi = state.y_range
            sums["bisect"] = (float(lo), float(hi), 0)
            req = StatsRequest("quantile", threshold=0.5 * (lo + hi))
            return StatsHubState("quantile", state.y_range, state.curve_clip, sums), {p: req for p in cfg.party_names}, []
        req = StatsRequest("moments", curve_clip=c2, projection=cfg.projection, center=mu)
        return StatsHubState("moments", state.y_range, state.curve_clip, sums), {p: req for p in cfg.party_names}, []
    if state.stage == "quantile":
        lo, hi, b = state.sums["bisect"]
        mid = 0.5 * (lo + hi)
        if float(total["count"][0]) >= float(cfg.tau) * float(cfg.n_total):
            hi = mid
        else:
            lo = mid
        b += 1
        sums["bisect"] = (lo, hi, b)
        sums.pop("count", None)
        if b < int(cfg.quantile_steps):
            req = StatsRequest("quantile", threshold=0.5 * (lo + hi))
            return StatsHubState("quantile", state.y_range, state.curve_clip, sums), {p: req for p in cfg.party_names}, []
        sums["quantile"] = 0.5 * (lo + hi)
        if cfg.constant_only:
            return StatsHubState("done", state.y_range, state.curve_clip, sums), \
                {p: StatsRequest("done") for p in cfg.party_names}, []
        req = StatsRequest("moments", curve_clip=sums["centered_clip"], projection=cfg.projection, center=sums["center"])
        return StatsHubState("moments", state.y_range, state.curve_clip, sums), {p: req for p in cfg.party_names}, []
    return StatsHubState("done", state.y_range, state.curve_clip, sums), \
        {p: StatsRequest("done") for p in cfg.party_names}, []
