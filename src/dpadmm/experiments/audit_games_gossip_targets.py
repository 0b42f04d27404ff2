"""Worst-case audit games of the gossip releases beyond yes/no (:mod:`dpadmm.algorithms.gossip.targets`): the
squared-loss regression sum and the multinomial (softmax) sum, against a hostile neighbour.

The setting is :mod:`.audit_games_gossip`'s: one node (degree = max degree = 1, N = 1, n = B = 8 rows), declared
column bounds [−1, 1] (no range rounds), d = 64, R = 4, β = 0.9, λ = 10⁻⁴, T = 4 releases at the noise multiplier
the library calibrates for ε = 1 at δ = 10⁻⁵ (T = 8 here: round 0, which the neighbour cannot
choose, weighs less); η = 1/L with the loss's L = c(R² + 1) + λ. The neighbour puts the
node's mixed point where it wants from round 1 on (``S = 2·target − w_t``); round 0 is every node's public start,
w = 0 (a non-binary run takes no starting intercept). Canary (row 0): the raw row all ones on D, all −1 on D'
(norm 8, clipped to R: z = ±u/2), the same label on both sides.

- **squared** (declared label bounds [−1, 1], canary label −1, so u = −1): targets ``w = (a·1, b)`` with
  (a R√d, b) = (0, 0) in round 0 (forced), then (0, 2) in odd rounds and (0.05, 0.95) in even ones: the canary's
  residuals r = clip(w·x̃, ±1) + 1 on D and D' are (1, 1), (2, 2), (2, 1.9), and the release moves by
  ``((r + r') z, r − r')``: 0.485, 0.970, 0.946 of Δ = 4√(R² + 1).
- **multinomial** (K = 3, canary class 0): targets with class 1's intercept b₁ = 0 (round 0, forced: p uniform), then
  10 in odd rounds and 5 in even ones, the others 0: the canary's ``p − e_0`` is the same on both sides (the margins
  differ only through the features, which the targets leave at 0) and the release moves by ``(p − e_0)(2z, 0)ᵀ``:
  0.560, 0.970, 0.960 of Δ = 2√2√(R² + 1).

The alternating targets make consecutive rounds' shifts differ, so a draw reused in the next round is caught; the
noise halved is caught as in every game. View: each release read off the broadcasts by inverting the heavy-ball
step (``G̃_t = (n/N)((β v_t − (w_{t+1} − w_mix_t))/η − λ w_mix_t)``); replay: the noiseless sums of the library
(:func:`~dpadmm.algorithms.gossip.targets.target_sum`) on D and on D' at the targets.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import engine
from ..algorithms.gossip import mechanism as gossip_mechanism
from ..algorithms.gossip import targets as gossip_targets
from ..algorithms.gossip.node import GossipInbox, gossip_mix, step_size
from ..algorithms.gossip.protocol import PROTOCOL as GOSSIP
from ..algorithms.gossip.schedule import DEFAULT_MOMENTUM, DEFAULT_RIDGE
from ..backends import PartySpec
from .audit_games import CANARY, DELTA, EPSILON, Game, calibrated_nm as _nm, constant_replay
from .audit_plants import plant_half, plant_patch, plant_reuse_rounds

B, D, R, T, N = 8, 64, 4.0, 8, 1
BETA, LAM = DEFAULT_MOMENTUM, DEFAULT_RIDGE
NODE = "node0"
LO, HI = -np.ones(D), np.ones(D)
K = 3
#: per loss, round 0 (the public start), odd rounds, even rounds ≥ 2: (a R√d, b) of the targets w = (a·1, b) (squared),
#: class 1's intercept (multinomial)
SQUARED_TARGETS = ((0.0, 0.0), (0.0, 2.0), (0.05, 0.95))
MULTINOMIAL_B1 = (0.0, 10.0, 5.0)


def _phase(t: int) -> int:
    return 0 if t == 0 else (1 if t % 2 else 2)


def _target(loss: str) -> gossip_targets.Target:
    return gossip_targets.Target(loss, K if loss == "multinomial" else 2)


def width(loss: str) -> int:
    return _target(loss).outputs * (D + 1)


def eta(loss: str) -> float:
    return step_size(R, LAM, _target(loss).curvature)


def _rows(loss: str):
    """(X on D, X on D', y): the canary at row 0 (all ones / all −1), the others uniform in the bounds."""
    gen = np.random.default_rng(29)
    X = gen.uniform(-1.0, 1.0, size=(B, D))
    y = gen.integers(0, K, B).astype(float) if loss == "multinomial" else gen.uniform(-1.0, 1.0, B)
    y[CANARY] = 0.0 if loss == "multinomial" else -1.0
    Xb = X.copy()
    X[CANARY], Xb[CANARY] = 1.0, -1.0
    return X, Xb, y


def target_point(loss: str, t: int) -> np.ndarray:
    w = np.zeros(width(loss))
    if loss == "multinomial":
        w[(D + 1) + D] = MULTINOMIAL_B1[_phase(t)]  # class 1's intercept
    else:
        a, b = SQUARED_TARGETS[_phase(t)]
        w[:D] = a / (R * np.sqrt(D))
        w[D] = b
    return w


def _options(loss: str, nm: float) -> dict:
    o = dict(degree=1, max_degree=1, n_nodes=N, n_total=B, rounds=T, range_rounds=0, noise_multiplier=nm,
             step=eta(loss), momentum=BETA, ridge=LAM, row_clip=R, average_from=T - 1, bounds=(LO, HI), loss=loss,
             classes=_target(loss).classes, huber_delta=1.0)
    if loss != "multinomial":
        o["target_bounds"] = (-1.0, 1.0)
    return o


@dataclass(frozen=True)
class _Hub:
    loss: str


def hub_init(cfg: _Hub):
    return 0, {NODE: GossipInbox(0, np.zeros(width(cfg.loss)), LO, HI, 0.0)}


def hub_step(cfg: _Hub, state, outboxes, *, rng):
    t = state + 1
    w = np.asarray(outboxes[NODE].w, dtype=np.float64)
    return t, {NODE: GossipInbox(t, 2.0 * target_point(cfg.loss, t) - w, LO, HI, 0.0)}, []


def releases(loss: str, rec: dict) -> np.ndarray:
    """The node's releases G̃_t read off one run's broadcasts and the neighbour's own inboxes: (T, width)."""
    inboxes, sent = rec["streams"][f"hub->{NODE}"], rec["streams"][NODE]
    p, e = width(loss), eta(loss)
    out = np.empty((rec["total"], p))
    w, v, mix_prev = None, np.zeros(p), None
    for t in range(rec["total"]):
        if t == 0:
            mix = np.zeros(p)  # the public start
        else:
            v = w - mix_prev
            mix = gossip_mix(w, np.asarray(inboxes[t].neighbour_sum, dtype=np.float64), 1, 1)
        w_next = np.asarray(sent[t].w, dtype=np.float64)
        out[t] = (B / N) * ((BETA * v - (w_next - mix)) / e - LAM * mix)
        w, mix_prev = w_next, mix
    return out


def noiseless_sums(loss: str, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The honest release without noise at every round's target, computed by the library: (T, width)."""
    Xt = gossip_mechanism.prepare(X, LO, HI, R)
    yy = y.astype(np.intp) if loss == "multinomial" else y
    return np.stack([gossip_targets.target_sum(Xt, yy, target_point(loss, t), _target(loss)) for t in range(T)])


def target_game(loss: str = "squared", *, plant=None, bug: str = "", tag: str = "") -> Game:
    """The worst-case game of the ``loss`` release (module docstring)."""
    X, Xb, y = _rows(loss)
    nm = _nm(T)

    def setup(side, total):
        record = GOSSIP.setup_type(name=NODE, X=Xb if side else X, y=y, options=_options(loss, nm))
        return [PartySpec.of(GOSSIP, NODE, record, owner=NODE)], engine.Hub(_Hub(loss), hub_init, hub_step,
                                                                             random=False)

    replay = constant_replay((noiseless_sums(loss, X, y), noiseless_sums(loss, Xb, y)), T)
    ratios = "0.485, then 0.970 / 0.946" if loss == "squared" else "0.560, then 0.970 / 0.960"
    return Game(
        name=f"worst-case gossip-{loss}{tag}",
        algorithm=f"noisy-gradient gossip, {loss} loss (consensus beyond yes/no)",
        relation="record-replace",
        adversary="the node's neighbour (or the router): chooses the neighbour sum from round 1, sees every broadcast",
        description=f"one node (degree 1, {B} rows, d = {D}, declared bounds, R = {R:g}), canary all ones / all -1 "
                    f"(same label, clipped to R); {T} gradient releases, epsilon = {EPSILON:g} at delta = {DELTA:g}",
        rounds=T, setup=setup, view=lambda rec: releases(loss, rec)[:, None, :], replay=replay,
        mechanism_party=NODE, delta=DELTA, plant=plant, broken=plant is not None, bug=bug,
        note=f"shift per round / Delta: {ratios} (round 0 is the public start w = 0)")


def _residuals_times_3(m, u, target):
    return 3.0 * _real_residuals(m, u, target)


_real_residuals = gossip_targets.residuals


def target_plants() -> list[Game]:
    """Per loss: the noise halved; a draw reused in the next round; (squared) the residual out of its bound."""
    out = []
    for loss in ("squared", "multinomial"):
        out += [target_game(loss, plant=plant_half(NODE), tag=" (planted: noise x1/2)",
                            bug="the node's standard-normal draws halved; its ledger keeps sigma"),
                target_game(loss, plant=plant_reuse_rounds(NODE), tag=" (planted: draw reused across rounds)",
                            bug="the node reuses its previous round's standard-normal draw every second round")]
    out.append(target_game("squared", plant=plant_patch(NODE, gossip_targets, "residuals", _residuals_times_3),
                           tag=" (planted: residual unbounded)",
                           bug="the regression residuals are multiplied by 3: |r| <= 2, a premise of Delta, fails"))
    return out


__all__ = ["noiseless_sums", "releases", "target_game", "target_plants", "target_point"]
