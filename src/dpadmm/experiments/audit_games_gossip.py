"""Worst-case audit game of noisy-gradient gossip (:mod:`dpadmm.algorithms.gossip`, the default private consensus):
the node's clipped gradient sums against a hostile neighbour.

Mechanism (:mod:`dpadmm.algorithms.gossip.mechanism`, release 1): every gradient round node i releases
``G̃ = G(w_mix) + N(0, (zΔ)² I)``, ``G(w) = Σ −y σ(−y w·x̃) x̃`` over its prepared rows (column clip to [−1, 1],
row clip to R, intercept 1 appended), ``Δ = 2√(R² + 1)``; what leaves the node is its broadcast
``w = w_mix + v``, ``v ← βv − η((N/n) G̃ + λ w_mix)`` (:func:`dpadmm.algorithms.gossip.node.heavy_ball`), a fixed invertible function of
G̃ given public values.

The adversary: the node's neighbour (equivalently the router, a hostile coordinator), who chooses the
neighbour sum S the node mixes with and the starting intercept, and sees every broadcast. One node
(degree = max degree = 1, N = 1, n = its B = 8 rows), declared column bounds lo = −1, hi = +1 (so no range
rounds: the range counts are a separate release, :func:`dpadmm.privacy.ranges.range_counts`, audited by :mod:`.audit_games_ranges`),
d = 64 columns, R = 4, the schedule's defaults β = 0.9, λ = 10⁻⁴, η = 1/L, T = 4 gradient rounds per audited run at
the noise multiplier the library calibrates for ε = 1 at δ = 10⁻⁵ over 4 releases.

- Canary (row 0, label +1 on both sides): the raw row all ones on D, all −1 on D' — norm 8 after the column map,
  clipped to R = 4 by the row clip (z = ±u/2, u all ones). The other rows: ordinary uniform rows in the bounds.
- Messages: the node's mixed point is made ``w_mix = (0, …, 0, b_t)`` every round — in round 0 by the starting
  intercept (the node caps it at MAX_INTERCEPT0 = 10 and ignores S: every node starts at the same point), in
  round t ≥ 1 by ``S = 2·target − w_t`` (with degree = max degree = 1, ``w_mix = w + (S − w)/2``), w_t the node's
  last broadcast, which the neighbour saw. b_t = −10, −3, −10, −3: every row's margin is b_t, so the canary's
  weight is σ(−b_t) on both sides and ``G_D − G_D' = −σ(−b_t)(2z, 0)``, of norm ``2R σ(−b_t)`` against
  ``Δ = 2√(R² + 1)``: 0.970 of it at b = −10 and 0.925 at b = −3 (the same-label canary's limit is
  R/√(R² + 1): a label flip would reach Δ only where the margins of x and x' differ by a lot, which round 0's
  w = (0, b₀) forbids). The alternating b makes consecutive rounds' shifts differ, so a draw reused from one
  round in the next leaves a noiseless combination that still separates the neighbours (the reuse plant).
- Extreme router (``gossip_game(router="extreme")``): the neighbour sends the overflow attack instead — sums of
  ±1.79·10³⁰⁸ whose signs flip every round (features +, intercept − in odd rounds), which made the node's mixed point
  ±∞ and its release NaN exactly on the side whose canary is at or above the midpoint (ε = ∞) before the node put
  what enters its step in the public box (:func:`.mechanism.bounded`). Now the node evaluates at a point of the box
  that depends on its earlier broadcasts, so the replay is per run: the noiseless sums on D and on D' at the very
  w_mix the node computed (:func:`.node.gossip_mix` of what the neighbour sent and saw), every release is finite and
  the row must stay within the claim like the honest one.
- View: from each broadcast the neighbour recomputes the release exactly as the node's step made it,
  ``G̃_t = (n/N)((β v_t − (w_{t+1} − w_mix_t))/η − λ w_mix_t)`` with ``v_t = w_t − w_mix_{t−1}`` (v_0 = 0) and
  w_mix_t = :func:`dpadmm.algorithms.gossip.node.gossip_mix` of what it sent; the replay is the noiseless sum on D and on D' at the
  target (:func:`dpadmm.algorithms.gossip.mechanism.gradient_sum` of :func:`dpadmm.privacy.ranges.prepare`, single precision as a noisy release: float32 rows,
  :func:`dpadmm.algorithms.gossip.mechanism.single_rows`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import engine
from ..algorithms.gossip import mechanism as gossip_mechanism
from ..algorithms.gossip.node import MAX_INTERCEPT0, GossipInbox, gossip_mix, step_size
from ..algorithms.gossip.protocol import PROTOCOL as GOSSIP
from ..algorithms.gossip.schedule import DEFAULT_MOMENTUM, DEFAULT_RIDGE
from ..backends import PartySpec
from ..privacy.ranges import prepare as ranges_prepare
from .audit_games import CANARY, DELTA, EPSILON, Game, calibrated_nm as _nm, constant_replay
from .audit_plants import plant_half, plant_patch, plant_reuse_rounds

G_B, G_D, G_R, G_T = 8, 64, 4.0, 4
G_N = 1  # nodes: n/N = G_B
G_INTERCEPTS = (-MAX_INTERCEPT0, -3.0, -MAX_INTERCEPT0, -3.0)  # b_t of the target w_mix = (0, …, 0, b_t)
G_BETA, G_LAM = DEFAULT_MOMENTUM, DEFAULT_RIDGE
G_ETA = step_size(G_R, G_LAM)
NODE = "node0"
LO, HI = -np.ones(G_D), np.ones(G_D)


def _rows():
    """(X on D, X on D', y): the canary at row 0 (all ones / all −1, label +1), the others uniform in the bounds."""
    gen = np.random.default_rng(23)
    X = gen.uniform(-1.0, 1.0, size=(G_B, G_D))
    y = np.where(gen.uniform(size=G_B) < 0.5, 1.0, -1.0)
    y[CANARY] = 1.0
    Xb = X.copy()
    X[CANARY], Xb[CANARY] = 1.0, -1.0
    return X, Xb, y


def _target(t: int) -> np.ndarray:
    w = np.zeros(G_D + 1)
    w[G_D] = G_INTERCEPTS[t % G_T]
    return w


def _options(nm: float) -> dict:
    return dict(degree=1, max_degree=1, n_nodes=G_N, n_total=G_B, rounds=G_T, range_rounds=0, noise_multiplier=nm,
                step=G_ETA, momentum=G_BETA, ridge=G_LAM, row_clip=G_R, average_from=G_T - 1, bounds=(LO, HI))


@dataclass(frozen=True)
class _GHub:
    """The hostile neighbour: the round-0 starting intercept, then the neighbour sums that put w_mix at the target."""

    lo: np.ndarray
    hi: np.ndarray


def ghub_init(cfg: _GHub):
    return 0, {NODE: GossipInbox(0, np.zeros(G_D + 1), cfg.lo, cfg.hi, float(G_INTERCEPTS[0]))}


def ghub_step(cfg: _GHub, state, outboxes, *, rng):
    t = state + 1
    w = np.asarray(outboxes[NODE].w, dtype=np.float64)  # the node's broadcast w_t
    S = 2.0 * _target(t) - w  # degree = max degree = 1: w_mix = w + (S − w)/2 = target
    return t, {NODE: GossipInbox(t, S, cfg.lo, cfg.hi, float(G_INTERCEPTS[0]))}, []


G_EXTREME = 1.79e308  # the extreme router's sums: ±G_EXTREME in every coordinate, the signs flipped every round


@dataclass(frozen=True)
class _GHubExtreme(_GHub):
    """The hostile neighbour that sends the overflow attack: ±1.79e308 sums, features + and intercept − in odd rounds,
    the reverse in even ones (the round-0 start as the honest game's)."""


def ghub_extreme_step(cfg: _GHub, state, outboxes, *, rng):
    t = state + 1
    S = np.full(G_D + 1, G_EXTREME)
    S[G_D] = -G_EXTREME
    if t % 2 == 0:
        S = -S
    return t, {NODE: GossipInbox(t, S, cfg.lo, cfg.hi, float(G_INTERCEPTS[0]))}, []


def releases(rec: dict) -> np.ndarray:
    """The node's releases G̃_t the neighbour reads off one run's broadcasts and its own inboxes: (T, d + 1)."""
    return _read_off(rec)[0]


def mixed_points(rec: dict) -> np.ndarray:
    """The points w_mix_t the node evaluated at in one run (what the neighbour computes from what it sent and saw)."""
    return _read_off(rec)[1]


def _read_off(rec: dict) -> tuple[np.ndarray, np.ndarray]:
    inboxes, sent = rec["streams"][f"hub->{NODE}"], rec["streams"][NODE]
    n_rounds = rec["total"]
    out, mixes = np.empty((n_rounds, G_D + 1)), np.empty((n_rounds, G_D + 1))
    w, v, mix_prev = None, np.zeros(G_D + 1), None
    for t in range(n_rounds):
        if t == 0:  # every node starts at (0, b_0) and mixes with neighbours at the same point
            w0 = np.zeros(G_D + 1)
            w0[G_D] = float(inboxes[0].intercept0)
            mix = gossip_mix(w0, w0, 1, 1)
        else:
            v = w - mix_prev
            mix = gossip_mix(w, np.asarray(inboxes[t].neighbour_sum, dtype=np.float64), 1, 1)
        w_next = np.asarray(sent[t].w, dtype=np.float64)
        out[t] = (G_B / G_N) * ((G_BETA * v - (w_next - mix)) / G_ETA - G_LAM * mix)
        mixes[t] = mix
        w, mix_prev = w_next, mix
    return out, mixes


def noiseless_sums(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The honest release without noise at every round's target, computed by the library: (T, d + 1)."""
    Xt = gossip_mechanism.single_rows(gossip_mechanism.prepare(X, LO, HI, G_R, order="F"))  # the node's float32 rows
    return np.stack([gossip_mechanism.gradient_sum(Xt, y, _target(t), single=True) for t in range(G_T)])


def replay_at_mixed_points(X: np.ndarray, Xb: np.ndarray, y: np.ndarray):
    """``Game.replay`` of the extreme router: the noiseless sums on D and on D' at each run's own mixed points."""
    Xt, Xtb = (gossip_mechanism.single_rows(gossip_mechanism.prepare(A, LO, HI, G_R, order="F")) for A in (X, Xb))

    def replay(side: int, rec: dict):
        W = mixed_points(rec)
        return tuple(np.stack([gossip_mechanism.gradient_sum(A, y, w, single=True) for w in W])[:, None, :]
                     for A in (Xt, Xtb))

    return replay


def gossip_game(*, plant=None, bug: str = "", tag: str = "", backend: str = "inprocess",
                router: str = "target") -> Game:
    """The worst-case gossip game; ``router="extreme"``: the neighbour sends the overflow attack (module docstring)."""
    X, Xb, y = _rows()
    nm = _nm(G_T)
    extreme = router == "extreme"
    hub = _GHubExtreme(LO, HI) if extreme else _GHub(LO, HI)
    step = ghub_extreme_step if extreme else ghub_step

    def setup(side, total):
        record = GOSSIP.setup_type(name=NODE, X=Xb if side else X, y=y, options=_options(nm))
        return [PartySpec.of(GOSSIP, NODE, record, owner=NODE)], engine.Hub(hub, ghub_init, step, random=False)

    if extreme:
        replay = replay_at_mixed_points(X, Xb, y)
    else:
        replay = constant_replay((noiseless_sums(X, y), noiseless_sums(Xb, y)), G_T)  # outside any plant

    def view(rec):
        return releases(rec)[:, None, :]

    sums = (f"sums of +-{G_EXTREME:g}, signs flipped every round (the overflow attack: the node puts them in its "
            "public box)" if extreme else "neighbour sums putting w_mix at (0, b), b = -10/-3")
    return Game(
        name=f"worst-case gossip-gradient{' (router: extreme sums)' if extreme else ''}{tag}",
        algorithm="noisy-gradient gossip (default private consensus)",
        relation="record-replace",
        adversary="the node's neighbour (or the router): chooses the neighbour sum and the starting intercept, sees "
                  "every broadcast",
        description=f"one node (degree 1, {G_B} rows, d = {G_D}, declared bounds, R = {G_R:g}), canary all ones / "
                    f"all -1 (label +1, clipped to R), {sums}; "
                    f"{G_T} gradient releases, epsilon = {EPSILON:g} at delta = {DELTA:g}",
        rounds=G_T, setup=setup, view=view, replay=replay, mechanism_party=NODE, delta=DELTA,
        plant=plant, broken=plant is not None, bug=bug, backend=backend,
        note=("before the box: release NaN on D' only (epsilon = inf); now every release finite, replayed at the "
              "node's own mixed points" if extreme else
              "ratio limit R sigma(-b)/sqrt(R^2 + 1) per round: 0.970 (b = -10), 0.925 (b = -3); the range counts "
              "(undeclared bounds) are the gossip-range game's (audit_games_ranges)"))


def _prepare_without_row_clip(X, lo, hi, row_clip, **kw):
    return ranges_prepare(X, lo, hi, np.inf, **kw)


_real_weights = gossip_mechanism._logistic_weights


def _weights_times_3(m, y, single=False):
    _real_weights(m, y, single)
    if single:
        m *= 3.0


def gossip_plants() -> list[Game]:
    """Noise halved; the row clip skipped; the single-precision logistic weights out of [−1, 1]; a draw reused in the
    next round (caught because consecutive rounds' shifts differ: b alternates)."""
    return [
        gossip_game(plant=plant_half(NODE), tag=" (planted: noise x1/2)",
                    bug="the node's standard-normal draws halved; its ledger keeps sigma"),
        gossip_game(plant=plant_patch(NODE, gossip_mechanism, "prepare", _prepare_without_row_clip),
                    tag=" (planted: row clip skipped)",
                    bug="the node prepares its rows without the row clip: the canary keeps norm 8 > R = 4"),
        gossip_game(plant=plant_patch(NODE, gossip_mechanism, "_logistic_weights", _weights_times_3),
                    tag=" (planted: logistic weights unbounded)",
                    bug="the single-precision logistic weights are multiplied by 3: |weight| <= 1, a premise of "
                        "Delta, fails"),
        gossip_game(plant=plant_reuse_rounds(NODE), tag=" (planted: draw reused across rounds)",
                    bug="the node reuses its previous round's standard-normal draw every second round"),
    ]


__all__ = ["gossip_game", "gossip_plants", "releases", "mixed_points", "noiseless_sums"]
