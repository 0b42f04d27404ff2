"""The gossip router (the hub): the DP range's bisection on the pooled counts, then every round each node's sum of
its neighbours' broadcasts (:mod:`.node` for the rounds and the node's step). It draws nothing and sees only what the
nodes release; its bounds and starting intercept are post-processing of released sums."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Mapping, NamedTuple

import numpy as np

from . import mechanism as mech
from .node import GossipInbox, RangeRequest, tail_mean


# ----------------------------------------------------------------------------- router (hub)
@dataclass(frozen=True, eq=False)
class RouterConfig:
    """The network (adjacency A, CSR N × N; node names in index order) and the public run constants."""

    A: Any
    names: tuple[str, ...]
    dim: int  # d (features, without the intercept)
    n_total: int
    range_rounds: int
    quantile: float = 0.02
    bounds: tuple | None = None  # declared (lo, hi): no range rounds
    average_from: int | None = None  # s_0 of the tail mean (None: no mean, the last broadcasts)
    positives_sd: float = 0.0  # the pooled positive count's noise standard deviation √N z_r Δ_r (public)
    label_range: bool = False  # regression without declared label bounds: the label is the range's last column
    outputs: int = 1  # K model rows (multinomial): every broadcast has K(d + 1) numbers
    tol: float = 0.0  # a non-private run's stopping tolerance (router_converged; 0: every round)

    @property
    def width(self) -> int:
        return self.outputs * (self.dim + 1)

    @functools.cached_property
    def neighbour_index(self):
        """For a 0/1 adjacency in CSR: per position k of a row's stored columns, the rows that have a k-th
        neighbour and those neighbours — ``S = A @ F`` is then ``S[rows_k] += F[cols_k]`` for k = 0, 1, … from
        zero, the order scipy's ``csr_matvecs`` adds them in (so the same numbers), without its dispatch (a
        third of a round's routing). None for any other matrix (scipy's own product)."""
        A = self.A
        if getattr(A, "format", None) != "csr" or not np.all(A.data == 1.0):
            return None
        indptr, indices = np.asarray(A.indptr), np.asarray(A.indices)
        degree = np.diff(indptr)
        return tuple((rows, indices[indptr[rows] + k]) for k in range(int(degree.max(initial=0)))
                     for rows in [np.flatnonzero(degree > k)])


def neighbour_sums(cfg: RouterConfig, F: np.ndarray) -> np.ndarray:
    """``S = A @ F``: every node's sum of its neighbours' rows of F (:attr:`RouterConfig.neighbour_index`)."""
    index = cfg.neighbour_index
    if index is None:
        return np.asarray(cfg.A @ F)
    S = np.zeros(F.shape)
    for rows, cols in index:
        if len(rows) == len(F):
            S += F[cols]
        else:
            S[rows] += F[cols]
    return S


class RouterState(NamedTuple):
    round: int
    F: np.ndarray  # (N, d + 1): the latest broadcasts
    a: np.ndarray | None = None  # (2, d) bisection brackets in asinh space
    b: np.ndarray | None = None
    lo: np.ndarray | None = None
    hi: np.ndarray | None = None
    change: float = math.inf
    path: tuple = ()  # the mean broadcast model after every gradient round (post-processing of broadcasts)
    intercept0: float = 0.0
    avg: np.ndarray | None = None  # (N, d + 1): each node's tail mean of its broadcasts (its model)
    target: tuple | None = None  # the label bounds of the DP range (regression without declared ones)
    # the first range round's pooled noisy positive count as released, unclipped (binary runs; None otherwise): an
    # unbiased estimate for the DP validation's base rate — the clipped rate behind intercept0 is pulled towards 1/2
    positives: float | None = None


def init_router(cfg: RouterConfig):
    N, d = len(cfg.names), cfg.dim
    F = np.zeros((N, cfg.width))
    if cfg.bounds is not None or cfg.range_rounds == 0:
        lo, hi = cfg.bounds if cfg.bounds is not None else (np.full(d, -1.0), np.full(d, 1.0))
        st = RouterState(0, F, lo=np.asarray(lo, float), hi=np.asarray(hi, float))
        return st, {nm: GossipInbox(0, np.zeros(cfg.width), st.lo, st.hi) for nm in cfg.names}
    a, b = mech.search_bracket(d + cfg.label_range)
    t = mech.thresholds(a, b)
    return RouterState(0, F, a, b), {nm: RangeRequest(0, t) for nm in cfg.names}


def router_step(cfg: RouterConfig, state: RouterState, outboxes: Mapping[str, Any], *, rng):
    """Range rounds: bisect on the pooled noisy counts; gradient rounds: deliver ``S_i = Σ_{j∈V_i} w_j``."""
    t = state.round + 1
    d = cfg.dim
    if state.lo is None:  # a range round
        pooled = sum(np.asarray(outboxes[nm].counts, dtype=np.float64) for nm in cfg.names)
        # the pooled noisy positive count (binary runs): the DP base rate, the starting intercept
        if state.round == 0 and outboxes[cfg.names[0]].positives is not None:
            pos = sum(float(outboxes[nm].positives) for nm in cfg.names)
            # no rarer than the count's noise can tell from 0; at most 1/2 (a count all noise: p = 1/2, b_0 = 0)
            p_min = min(0.5, max(1e-3, cfg.positives_sd / cfg.n_total))
            p = min(max(pos / cfg.n_total, p_min), 1.0 - p_min)
            state = state._replace(intercept0=float(math.log(p / (1.0 - p))), positives=pos)
        targets = np.array([cfg.quantile, 1.0 - cfg.quantile]) * cfg.n_total
        a, b = mech.bisect(state.a, state.b, pooled, targets)
        if t < cfg.range_rounds:
            thr = mech.thresholds(a, b)
            return state._replace(round=t, a=a, b=b), {nm: RangeRequest(t, thr) for nm in cfg.names}, []
        lo, hi = mech.bounds_from_bracket(a, b)
        tb = (float(lo[d]), float(hi[d])) if cfg.label_range else None  # the label's range: the last column's
        st = state._replace(round=t, a=a, b=b, lo=lo[:d], hi=hi[:d], target=tb)
        return st, {nm: GossipInbox(t, np.zeros(cfg.width), st.lo, st.hi, st.intercept0, tb) for nm in cfg.names}, []
    F = np.array([np.asarray(outboxes[nm].w, dtype=np.float64) for nm in cfg.names], dtype=np.float64)
    S = neighbour_sums(cfg, F)
    D = F - state.F
    D *= D
    # max_i ‖F_i − F_i(prev)‖: numpy's norm is sqrt(add.reduce(x·x)) and sqrt commutes with max (monotone, correctly
    # rounded); the mean broadcast is numpy's mean, add.reduce / N — the same numbers without the wrappers' cost
    change = math.sqrt(float(np.add.reduce(D, axis=1).max()))
    inboxes = {nm: GossipInbox(t, S[k], state.lo, state.hi, state.intercept0, state.target)
               for k, nm in enumerate(cfg.names)}
    avg = state.avg if cfg.average_from is None else tail_mean(state.avg, F, len(state.path) - cfg.average_from)
    mean = np.add.reduce(F, axis=0)
    mean /= len(F)
    return state._replace(round=t, F=F, change=change, path=state.path + (mean,), avg=avg), inboxes, []


def router_converged(cfg: RouterConfig, state: RouterState) -> bool:
    """A non-private run's stop (``tol`` > 0; the driver never asks in a private run): after a gradient round, every
    node's broadcast moved by ≤ tol (``RouterState.change``). Not the consensus error: with a constant step each
    broadcast keeps its node's own gradient step, so the broadcasts stay apart at the optimum (by η times the
    nodes' local gradients) while their mean, the model, has settled."""
    return cfg.tol > 0 and state.lo is not None and bool(state.path) and state.change <= cfg.tol


def router_metrics(cfg: RouterConfig, state: RouterState, diagnostics: Mapping[str, dict]) -> dict:
    """Monitoring: the nodes' mean training loss (where reported) and the consensus error of the broadcasts."""
    losses = [diagnostics[nm]["node_loss"] for nm in cfg.names]
    fbar = state.F.mean(axis=0)
    return {"train_loss": float(np.nanmean(losses)) if not all(map(math.isnan, losses)) else math.nan,
            "consensus_error": float(np.max(np.linalg.norm(state.F - fbar, axis=1))), "change": state.change}
