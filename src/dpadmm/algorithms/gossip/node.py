"""Noisy-gradient gossip logistic regression: one node's step, and the router that carries the broadcasts.

Problem: ``min_w (1/n) Σ_i Σ_{(x,y)∈D_i} ℓ(y, w·x̃) + (λ/2)‖w‖²`` over the nodes i = 1…N of a connected graph,
x̃ = (z, 1) the prepared row (:func:`.mechanism.prepare`, intercept last), ℓ logistic — or squared, Huber or the
softmax over K classes (``NodeConfig.loss``; :mod:`.targets`: the model then has K(d + 1) coordinates).

Rounds (decentralised gradient descent with heavy-ball momentum, one gossip step per round; Muffliato-style
local noise then gossip averaging, Cyffers, Even, Bellet & Massoulié 2022):

- range rounds r = 0…K−1 (only without declared bounds): the node releases noisy counts at the hub's
  thresholds (:func:`.mechanism.range_counts`); the hub bisects on the pooled counts and, after K rounds,
  sends every node the same bounds (lo, hi) — a post-processing of released sums.
- gradient rounds s = 0…T−1 at node i (``S_i`` = Σ of its neighbours' broadcasts w_j(s), V_i its degree,
  ``V_max`` the public maximum degree, so the mixing matrix ``W_ij = 1/(1 + V_max)`` on edges,
  ``W_ii = 1 − V_i/(1 + V_max)`` is symmetric and doubly stochastic; on a complete graph W = 11ᵀ/N):

      w_mix = w_i + (S_i − V_i w_i)/(1 + V_max)                          (gossip averaging)
      (s = 0: every w_i = (0, b_0), b_0 the logit of the pooled DP base rate of the first range round, or 0;
      the rate clipped to [p_min, 1 − p_min], p_min = min(1/2, max(10⁻³, σ_+/n)) with σ_+ = √N z_r Δ_r the pooled count's
      public noise: a rate the noise cannot tell from 0 is not extrapolated — on AER::HMDA at ε = 1, σ_+ ≈ 250
      against 235 positives, and a noisy count near 0 started one seed at b_0 = −6.9, far from the −2 the data
      has, which 19 rounds did not undo)
      G̃_i  = G_i(w_mix) + N(0, σ² I)                                     (the release, .mechanism)
      v_i  ← β v_i − η((N/n) G̃_i + λ w_mix)                              (heavy ball)
      w_i  ← w_mix + v_i                                                  (broadcast)

  The node average w̄ = (1/N) Σ w_i then follows centralised heavy-ball gradient descent on the pooled
  objective with the summed noise (exactly so on a complete graph). η = 1/L or 2/L (the run's public schedule,
  :func:`.schedule.default_schedule`) with the public smoothness bound L = (R² + 1)/4 + λ of the objective
  (ℓ'' ≤ 1/4, ‖x̃‖² ≤ R² + 1).

- the model (Polyak–Ruppert tail averaging, post-processing of the broadcasts): a node's model is the mean of
  its own broadcasts w_i(s + 1) over the gradient rounds s ≥ s_0 (``NodeConfig.average_from``, public;
  :func:`.schedule.average_from`), and the hub's is the same mean of every node's broadcasts it carried. The
  schedule sets s_0: the last three quarters of the rounds in a signal-rich run, s_0 = T − 1 (the last
  broadcast) otherwise and when a Setup does not say.

| symbol | code |
|--------|------|
| w_i, v_i | ``NodeState.w``, ``NodeState.v`` |
| S_i | ``GossipInbox.neighbour_sum`` |
| (lo, hi) | ``NodeState.lo``, ``NodeState.hi`` (fixed at the first gradient round) |
| N, n, V_i, V_max | ``NodeConfig.n_nodes``, ``.n_total``, ``.degree``, ``.max_degree`` |
| η, β, λ, R | ``NodeConfig.step``, ``.momentum``, ``.ridge``, ``.row_clip`` |
| s_0, the tail mean of w_i | ``NodeConfig.average_from``, ``NodeState.avg`` |
| σ/Δ (both releases) | ``NodeConfig.noise_multiplier`` |
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ...exceptions import ProtocolError
from ...protocol.spec import check_setup
from ...privacy.policy import PolicyRefusal
from .choice import choose
from .messages import GossipOptions
from . import mechanism as mech
from . import targets
from . import validation as val

MAX_INTERCEPT0 = 10.0  # |starting intercept| accepted from the hub (its DP base rate is clipped to [1e-3, 1 − 1e-3] at least)


# ----------------------------------------------------------------------------- messages
class RangeRequest(NamedTuple):
    """Hub → node (range rounds): public thresholds (2, d), lower and upper quantile of every column (2, d + 1: the
    label's last, in a regression run without declared label bounds)."""

    round: int
    thresholds: np.ndarray


class RangeCounts(NamedTuple):
    """Node → hub: the noisy counts #{x_j ≤ t_qj} (2, d); in the first range round also #{y = +1}."""

    counts: np.ndarray
    positives: float | None = None


class GossipInbox(NamedTuple):
    """Hub → node (gradient rounds): the sum of the neighbours' broadcasts and the public column bounds."""

    round: int
    neighbour_sum: np.ndarray  # (d + 1,)
    lo: np.ndarray  # (d,)
    hi: np.ndarray  # (d,)
    intercept0: float = 0.0  # the starting intercept (logit of the pooled DP base rate; 0 without range rounds)
    target: tuple | None = None  # regression: the label bounds (lo_y, hi_y) of the DP range (None: declared)


class ModelBroadcast(NamedTuple):
    """Node → neighbours: w_i(s + 1) (post-processing of the node's noisy gradient sums). Nothing else leaves."""

    w: np.ndarray  # (d + 1,); K(d + 1) with K classes (targets.py)


# ----------------------------------------------------------------------------- node
@dataclass(frozen=True, eq=False)
class NodeConfig:
    """What a node holds. X (raw units) and y never leave it."""

    name: str
    X: np.ndarray  # (B, d) raw
    y: np.ndarray  # (B,) ±1; real labels (regression) or class indices 0…K−1 (multinomial)
    degree: int
    max_degree: int
    n_nodes: int
    n_total: int
    rounds: int  # T gradient rounds
    range_rounds: int  # K range rounds (0: declared bounds)
    noise_multiplier: float  # σ/Δ of every release (0: a non-private run)
    step: float  # η
    momentum: float  # β
    ridge: float  # λ
    row_clip: float  # R
    bounds: tuple | None = None  # declared (lo, hi), each (d,)
    average_from: int = 0  # s_0: the model is the mean of the broadcasts of gradient rounds s >= s_0
    loss: str = "logistic"  # targets.LOSSES
    classes: int = 2  # K (multinomial)
    huber_delta: float = 1.0  # δ (Huber, scaled label units)
    target_bounds: tuple | None = None  # regression: declared label bounds (lo_y, hi_y)
    validation: tuple | None = None  # (ε_b, ε_c) of the declared validation stage (validation.py; None: none)

    @functools.cached_property
    def target(self) -> targets.Target:
        return targets.Target(self.loss, self.classes, self.huber_delta)

    @property
    def width(self) -> int:
        """The model's length: K(d + 1) (d + 1 but for multinomial)."""
        return self.target.outputs * (self.X.shape[1] + 1)

    @property
    def label_range(self) -> bool:
        """Whether the label is one more column of the range counts (regression without declared label bounds)."""
        return self.target.regression and self.target_bounds is None


class NodeState(NamedTuple):
    round: int
    w: np.ndarray
    v: np.ndarray
    lo: np.ndarray | None = None
    hi: np.ndarray | None = None
    Xt: np.ndarray | None = None  # the node's prepared rows (B, d + 1), made once at its first gradient round
    avg: np.ndarray | None = None  # the mean of its broadcasts w_i(s + 1), s >= s_0 (its model)
    columns: np.ndarray | None = None  # its raw columns sorted (d, B), during the range rounds (mech.sorted_columns)
    yt: np.ndarray | None = None  # regression: its labels mapped by the label bounds (targets.scale_labels)
    validated: tuple = ()  # the validation stages it has released ("count", "compare"): each once per run


def step_size(row_clip: float, ridge: float, curvature: float | None = None) -> float:
    """η = 1/L, L = (R² + 1)/4 + λ: the public smoothness bound of the objective (``curvature`` c: L = c(R² + 1) + λ,
    :class:`.targets.Target`'s)."""
    if curvature is not None:
        return 1.0 / (float(curvature) * (float(row_clip) ** 2 + 1.0) + float(ridge))
    return 1.0 / ((float(row_clip) ** 2 + 1.0) / 4.0 + float(ridge))


def setup_node(name: str, X, y, options: GossipOptions):
    """Node-side setup (``PartySpec.setup``): w(0) = v(0) = 0 (data-independent). ``options``: the run's typed
    constants (a field mapping is built into the record by name)."""
    X = np.asarray(X, dtype=np.float64)
    o = options if isinstance(options, GossipOptions) else check_setup(GossipOptions, options)
    target = targets.Target(str(o.loss), int(o.classes), float(o.huber_delta))
    y = targets.node_labels(y, target, private=float(o.noise_multiplier) > 0)  # no label-dependent refusal
    bounds, tb = o.bounds, o.target_bounds
    if bounds is not None:
        bounds = (np.asarray(bounds[0], dtype=np.float64), np.asarray(bounds[1], dtype=np.float64))
    cfg = NodeConfig(str(name), X, y, int(o.degree), int(o.max_degree), int(o.n_nodes), int(o.n_total),
                     int(o.rounds), int(o.range_rounds), float(o.noise_multiplier), float(o.step),
                     float(o.momentum), float(o.ridge), float(o.row_clip), bounds,
                     int(o.rounds) - 1 if o.average_from is None else int(o.average_from), target.loss,
                     int(target.classes), float(target.huber_delta),
                     None if tb is None else (float(tb[0]), float(tb[1])),
                     None if o.validation is None else tuple(float(e) for e in o.validation))
    return cfg, NodeState(0, np.zeros(cfg.width), np.zeros(cfg.width))


def _refuse(cfg: NodeConfig, what: str) -> ProtocolError:
    """A refusal at the node: nothing is released."""
    return PolicyRefusal(f"node {cfg.name!r} refused round: {what}")


def _check_bounds(cfg: NodeConfig, lo, hi):
    d = cfg.X.shape[1]
    lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
    if lo.shape != (d,) or hi.shape != (d,) or not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))
                                                      and np.all(hi > lo)):
        raise _refuse(cfg, f"the column bounds must be {d} finite pairs with lo < hi")
    return lo, hi


def _label_bounds(tb) -> tuple[float, float] | None:
    """(lo_y, hi_y) as two finite floats with lo < hi, or None."""
    try:
        lo, hi = (float(b) for b in tb)
    except (TypeError, ValueError):
        return None
    return (lo, hi) if math.isfinite(lo) and math.isfinite(hi) and hi > lo else None


def node_step(cfg: NodeConfig, state: NodeState, inbox, *, rng: np.random.Generator):
    """One round at the node: a range count (range rounds) or mix → noisy gradient → heavy-ball step."""
    r = state.round
    d, p, logistic = cfg.X.shape[1], cfg.width, cfg.loss == "logistic"
    if isinstance(inbox, RangeRequest):
        t = np.asarray(inbox.thresholds, dtype=np.float64)
        if r >= cfg.range_rounds or cfg.bounds is not None:
            raise _refuse(cfg, f"a range count beyond the {cfg.range_rounds} declared at Setup")
        dr = d + cfg.label_range  # regression without declared label bounds: the label is one more column
        if t.shape != (2, dr) or not np.all(np.isfinite(t)):
            raise _refuse(cfg, f"the thresholds must be 2 x {dr} finite numbers")
        Xr = np.column_stack([cfg.X, cfg.y]) if cfg.label_range else cfg.X
        cols = state.columns if state.columns is not None else mech.sorted_columns(Xr)
        counts, pos, events = mech.range_counts(cfg.name, r + 1, Xr, t, cfg.noise_multiplier, rng,
                                                cfg.y if r == 0 and logistic else None, columns=cols)
        # the sorted columns serve the range rounds only: dropped after the last (never held beside the prepared rows)
        keep = cols if r + 1 < cfg.range_rounds else None
        return state._replace(round=r + 1, columns=keep), RangeCounts(counts, pos), events
    s = r - (0 if cfg.bounds is not None else cfg.range_rounds)
    if isinstance(inbox, val.ValidationRequest):  # the declared stage after the last gradient round (validation.py)
        if not logistic:
            raise _refuse(cfg, f"a validation of a {cfg.loss} run (the comparison is of a binary logistic model)")
        if s < cfg.rounds or state.Xt is None:
            raise _refuse(cfg, f"a validation before its {cfg.rounds} declared gradient rounds are done")
        done, release, events = val.answer(cfg.name, _rows64(state.Xt), cfg.y, cfg.validation, state.validated, inbox, rng)
        return state._replace(round=r + 1, validated=done), release, events
    if not isinstance(inbox, GossipInbox):
        raise _refuse(cfg, f"an unknown message {type(inbox).__name__}")
    if s < 0:
        raise _refuse(cfg, "a gradient round before the declared range rounds")
    if s >= cfg.rounds:
        raise _refuse(cfg, f"a gradient round beyond the {cfg.rounds} declared at Setup")
    S = np.asarray(inbox.neighbour_sum, dtype=np.float64)
    if S.shape != (p,) or not np.isfinite(S).all():
        raise _refuse(cfg, f"the neighbour sum must be {p} finite numbers")
    yt = state.yt
    if state.lo is not None:
        lo, hi, Xt = state.lo, state.hi, mech.column_major(state.Xt)  # fixed at the first gradient round
    else:
        lo, hi = _check_bounds(cfg, *(cfg.bounds if cfg.bounds is not None else (inbox.lo, inbox.hi)))
        # [column clip, row clip, intercept]: the premises of Δ; kept column-major for the BLAS products
        Xt = mech.prepare(cfg.X, lo, hi, cfg.row_clip, order="F")
        if logistic and cfg.noise_multiplier > 0:  # float32, rounded toward zero: the clips still bound every row
            Xt = mech.single_rows(Xt)
        if cfg.target.regression:  # [label clip]: |u| ≤ 1, a premise of the regression Δ (targets.py)
            tb = _label_bounds(cfg.target_bounds if cfg.target_bounds is not None else inbox.target)
            if tb is None:
                raise _refuse(cfg, "the label bounds must be two finite numbers lo < hi")
            yt = targets.scale_labels(cfg.y, *tb)
    w0, v0 = state.w, state.v
    if s == 0:  # every node starts at the same public point: w = 0 with the hub's starting intercept
        b0 = float(inbox.intercept0)
        if not (math.isfinite(b0) and abs(b0) <= MAX_INTERCEPT0):
            raise _refuse(cfg, f"the starting intercept must be finite with |b| <= {MAX_INTERCEPT0:g}")
        w0 = np.zeros(p)
        w0[d] = b0 if logistic else 0.0
        v0 = np.zeros(p)
        S = cfg.degree * w0  # the neighbours start at the same point
    w_mix = gossip_mix(w0, S, cfg.degree, cfg.max_degree)
    if logistic:
        G, events = mech.gradient_release(cfg.name, r + 1, Xt, cfg.y, cfg.row_clip, w_mix, cfg.noise_multiplier, rng)
    else:
        G, events = targets.target_release(cfg.name, r + 1, Xt, cfg.y if yt is None else yt, cfg.row_clip, w_mix,
                                           cfg.noise_multiplier, rng, cfg.target)
    w, v = heavy_ball(cfg, w_mix, v0, G)
    avg = tail_mean(state.avg, w, s - cfg.average_from)
    return NodeState(r + 1, w, v, lo, hi, Xt, avg, None, yt), ModelBroadcast(w), events


def gossip_mix(w0: np.ndarray, S: np.ndarray, degree, max_degree: int) -> np.ndarray:
    """Gossip averaging of a node's vector with its neighbours' sum, in the public box: the sum clipped to
    ``degree · MODEL_BOUND`` first, the mixed point to ``MODEL_BOUND`` (:func:`.mechanism.bounded`; the
    *Bounded point* of :mod:`.mechanism`: finite and bounded whatever S holds, the plain mix where nothing is
    clipped). Elementwise: the same numbers for one node's (d + 1)-vectors or the (N, d + 1) stack of :mod:`.batch`
    (``degree`` then an (N, 1) column)."""
    S = mech.bounded(S, degree * mech.MODEL_BOUND)
    with np.errstate(over="ignore", invalid="ignore"):  # only a w0 outside the box could overflow: clipped below
        w_mix = w0 + (S - degree * w0) / (1.0 + max_degree)
    return mech.bounded(w_mix)


def heavy_ball(cfg: NodeConfig, w_mix: np.ndarray, v0: np.ndarray, G: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The step after the release: the ridge gradient from the noisy sum ``G`` and the heavy-ball update (the run's
    public constants of ``cfg``); elementwise like :func:`gossip_mix`. Returns (w, v), both in the public box
    (:func:`.mechanism.bounded`: the broadcast and the kept velocity stay finite whatever G holds; unchanged where
    nothing is clipped)."""
    with np.errstate(over="ignore", invalid="ignore"):  # a post-processing of G; put back in the box below
        grad = (cfg.n_nodes / cfg.n_total) * G + cfg.ridge * w_mix
        v = mech.bounded(cfg.momentum * v0 - cfg.step * grad)
        return mech.bounded(w_mix + v), v


def tail_mean(avg, w: np.ndarray, k: int):
    """The running mean of the tail: ``avg`` is the mean of k earlier broadcasts (k < 0: not in the tail yet)."""
    if k < 0:
        return avg
    return w.copy() if k == 0 or avg is None else avg + (w - avg) / (k + 1)


def peer_inbox(cfg: NodeConfig, state: NodeState, round_: int, neighbour_sum) -> GossipInbox:
    """Peer to peer (one node per party, declared bounds): round ``round_``'s inbox from the sum of the
    neighbours' broadcasts (``None`` in round 0, when every node starts at the same point). The routed run's
    inbox is the same: with declared bounds there are no range rounds and the starting intercept is 0."""
    if cfg.bounds is None:
        raise _refuse(cfg, "peer to peer needs declared column bounds (the DP column range pools every node's "
                           "counts through the coordinator)")
    # the neighbours' broadcasts were summed by the backend, unchecked: a sum that overflowed (or a NaN one sent) is
    # put in the public box here, data-independently, as gossip_mix would (mechanism: *Bounded point*)
    S = np.zeros(cfg.width) if neighbour_sum is None else mech.bounded(neighbour_sum, cfg.degree * mech.MODEL_BOUND)
    return GossipInbox(int(round_), S, cfg.bounds[0], cfg.bounds[1], 0.0)


def peer_broadcast(outbox: ModelBroadcast) -> np.ndarray:
    """Peer to peer: the node's broadcast w_i(s + 1), sent to each of its neighbours."""
    return np.asarray(outbox.w, dtype=np.float64)


def _rows64(Xt: np.ndarray) -> np.ndarray:
    """The kept prepared rows in float64 for the node's own after-run work (its choice, its validation answer): a
    noisy run keeps them in float32 (:func:`.mechanism.single_rows`), exactly representable in float64."""
    return np.asarray(Xt, dtype=np.float64)


def node_diagnostics(cfg: NodeConfig, state: NodeState) -> dict:
    """Monitoring (not a message; refused in private runs): the node's mean training log loss at w_i."""
    if state.lo is None:
        return {"node_loss": math.nan, "node_samples": cfg.X.shape[0]}
    if cfg.loss != "logistic":  # the run's own loss (scaled label units for regression)
        return {"node_loss": targets.mean_loss(state.Xt, cfg.y if state.yt is None else state.yt, state.w, cfg.target),
                "node_samples": cfg.X.shape[0]}
    loss = float(np.mean(np.logaddexp(0.0, -cfg.y * (state.Xt @ state.w))))
    return {"node_loss": loss, "node_samples": cfg.X.shape[0]}


def node_model(cfg: NodeConfig, state: NodeState):
    """The node's final local model: the mean of its tail broadcasts (its last broadcast before the tail),
    intercept last — the consensus model, what its ``model.npz`` holds as ``coef``.

    After a private run (a gradient round done) a deployed node always recalibrates it on its own rows (its own
    file: the estimator's ``recalibrate=`` governs the simulation's attributes only)
    (:func:`.choice.choose`: nothing released, no ε) and returns the named arrays ``coef`` (the consensus
    model: a post-processing of the released broadcasts, shareable under the run's guarantee), ``recalibrated``
    (the model it should use itself: a function of its own rows that no accountant covers, not for release) and
    ``calibration`` (its Platt (a, b))."""
    w = (state.w if state.avg is None else state.avg).copy()
    if cfg.noise_multiplier <= 0 or state.Xt is None or cfg.loss != "logistic":  # Platt: the binary model's only
        return w
    c = choose(_rows64(state.Xt), cfg.y, w, X_raw=cfg.X)  # recalibrated consensus, own model or own base rate (choice.py)
    return {"coef": w, "recalibrated": c.model, "calibration": np.array([c.a, c.b]), "choice": np.str_(c.choice),
            "space": np.str_(c.space)}
