"""Worst-case audit game of the gossip protocol's DP column range (:mod:`dpadmm.algorithms.gossip`, undeclared
column bounds): the node's noisy threshold counts against a hostile hub.

Mechanism (:mod:`dpadmm.algorithms.gossip.mechanism`, release 2; :func:`dpadmm.privacy.ranges.range_counts`):
without declared bounds a node first answers K range rounds. In range round r it releases
``c_{q,j} = #{x_j ≤ t_{q,j}} + N(0, (zΔ_r)²)`` at the hub's public thresholds t (2 × d) and, in the first round
only, ``#{y = +1} + N(0, (zΔ_r)²)``; ``Δ_r = √(2d)``, ``√(2d + 1)`` in the first round (the label count). The
node refuses a count beyond the K declared at Setup and thresholds that are not 2 × d finite numbers; any finite
thresholds are the hub's to choose.

The adversary: the hub (the coordinator that pools the counts), which chooses every threshold and sees every
count. One node, no declared bounds, K = 4 range rounds (the Setup declares one gradient round too, never
played: an audited run is the K range rounds), d = 8 columns, 6 rows, at the noise multiplier the library
calibrates for ε = 1 at δ = 10⁻⁵ over 4 releases (each event's σ/Δ is that z; round 1's Δ includes the label
count).

- Canary (row 0): raw values −10³ in every column and label −1 on D, +10³ and label +1 on D'. The other rows:
  uniform in [−1, 1], random labels.
- Messages: thresholds all 0 in every round (``RangeRequest(r, 0)``); the hub ignores the answers. The canary is
  below every threshold on D and above on D', so each of the 2d counts drops by exactly 1 and (round 1) the
  positive count rises by 1: ``‖Δ‖ = √(2d + 1)`` in round 1 and ``√(2d)`` after — the sensitivity of every
  round, ratio limit 1.
- View: the released counts of each round, (2d + 1) numbers (the positive count in round 1, 0 after — the same 0
  in the replay); replay: the exact counts on D and D' (:func:`~dpadmm.privacy.ranges.range_counts` without noise).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import engine
from ..algorithms.gossip import mechanism as gossip_mechanism
from ..algorithms.gossip.node import RangeRequest, step_size
from ..algorithms.gossip.protocol import PROTOCOL as GOSSIP
from ..algorithms.gossip.schedule import DEFAULT_MOMENTUM, DEFAULT_RIDGE
from ..backends import PartySpec
from ..privacy import ranges as privacy_ranges
from .audit_games import CANARY, DELTA, EPSILON, Game, calibrated_nm as _nm, constant_replay
from .audit_plants import plant_half, plant_patch

R_B, R_D, R_K = 6, 8, 4  # rows, columns, range rounds (one audited run)
R_CANARY = 1e3  # |raw value| of the canary: below every threshold on D, above on D'
NODE = "node0"
THRESHOLDS = np.zeros((2, R_D))  # the hub's thresholds, every round


def _rows():
    """(X on D, X on D', y on D, y on D'): the canary at row 0 (−10³ and label −1 / +10³ and label +1)."""
    gen = np.random.default_rng(31)
    X = gen.uniform(-1.0, 1.0, size=(R_B, R_D))
    y = np.where(gen.uniform(size=R_B) < 0.5, 1.0, -1.0)
    Xb, yb = X.copy(), y.copy()
    X[CANARY], Xb[CANARY] = -R_CANARY, R_CANARY
    y[CANARY], yb[CANARY] = -1.0, 1.0
    return X, Xb, y, yb


def _options(nm: float) -> dict:
    return dict(degree=1, max_degree=1, n_nodes=1, n_total=R_B, rounds=1, range_rounds=R_K, noise_multiplier=nm,
                step=step_size(1.0, DEFAULT_RIDGE), momentum=DEFAULT_MOMENTUM, ridge=DEFAULT_RIDGE, row_clip=1.0,
                average_from=0, bounds=None)


@dataclass(frozen=True)
class _RHub:
    """The hostile hub: the same thresholds every range round, whatever the counts."""

    thresholds: np.ndarray


def rhub_init(cfg: _RHub):
    return 0, {NODE: RangeRequest(0, cfg.thresholds)}


def rhub_step(cfg: _RHub, state, outboxes, *, rng):
    t = state + 1
    return t, {NODE: RangeRequest(t, cfg.thresholds)}, []


def releases(rec: dict) -> np.ndarray:
    """The counts the hub received in one run, (K, 2d + 1): the 2 × d counts, then the positive count (round 1;
    0 in later rounds, where none is released)."""
    out = np.zeros((rec["total"], 2 * R_D + 1))
    for r, msg in enumerate(rec["streams"][NODE][:rec["total"]]):
        out[r, :2 * R_D] = np.asarray(msg.counts, dtype=np.float64).ravel()
        if msg.positives is not None:
            out[r, 2 * R_D] = float(msg.positives)
    return out


def exact_counts(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The honest release without noise in every round, computed by the library: (K, 2d + 1)."""
    out = np.zeros((R_K, 2 * R_D + 1))
    for r in range(R_K):
        counts, pos, _ = privacy_ranges.range_counts(NODE, r + 1, X, THRESHOLDS, 0.0, None, y if r == 0 else None)
        out[r, :2 * R_D] = counts.ravel()
        out[r, 2 * R_D] = 0.0 if pos is None else pos
    return out


def range_game(*, plant=None, bug: str = "", tag: str = "", backend: str = "inprocess", runs_factor: int = 5) -> Game:

    X, Xb, y, yb = _rows()
    nm = _nm(R_K)
    hub = _RHub(THRESHOLDS)

    def setup(side, total):
        record = GOSSIP.setup_type(name=NODE, X=Xb if side else X, y=yb if side else y, options=_options(nm))
        return [PartySpec.of(GOSSIP, NODE, record, owner=NODE)], engine.Hub(hub, rhub_init, rhub_step, random=False)

    means = (exact_counts(X, y), exact_counts(Xb, yb))  # computed here, outside any plant

    def view(rec):
        return releases(rec)[:, None, :]

    return Game(
        name=f"worst-case gossip-range{tag}", algorithm="DP column range of gossip (undeclared bounds)",
        relation="record-replace", adversary="the hub: chooses every threshold, sees every count",
        description=f"one node ({R_B} rows, d = {R_D}, no declared bounds), canary -1e3 / +1e3 in every column "
                    f"with its label flipped, thresholds 0 every round; {R_K} range releases (the first with the "
                    f"positive count), epsilon = {EPSILON:g} at delta = {DELTA:g}",
        rounds=R_K, setup=setup, view=view, replay=constant_replay(means, R_K), mechanism_party=NODE, delta=DELTA,
        plant=plant, broken=plant is not None, bug=bug, backend=backend, runs_factor=runs_factor,
        note="ratio limit 1: every count (and the positive count in round 1) moves by 1")


def _sensitivity_of_d(d: int, labels: bool = False) -> float:
    return float(np.sqrt(int(d) + (1.0 if labels else 0.0)))


_real_range_counts = gossip_mechanism.range_counts


def _weighted_range_counts(name, round_, X, thresholds, noise_multiplier, rng, y=None, columns=None):
    """The honest noisy counts plus each counted value's weight beyond 1: a value counts ``clip(|x|, 1, 2)``."""
    noisy, pos, events = _real_range_counts(name, round_, X, thresholds, noise_multiplier, rng, y, columns=columns)
    X, t = np.asarray(X, dtype=np.float64), np.asarray(thresholds, dtype=np.float64)
    extra = np.stack([((X <= t[q][None, :]) * (np.clip(np.abs(X), 1.0, 2.0) - 1.0)).sum(axis=0)
                      for q in range(t.shape[0])])
    return noisy + extra, pos, events


def range_plants() -> list[Game]:
    """Noise halved; the sensitivity under-stated (√d for √(2d)); a count that is no indicator (weighted by the
    value's magnitude, capped at 2)."""
    return [
        range_game(plant=plant_half(NODE), tag=" (planted: noise x1/2)",
                   bug="the node's standard-normal draws halved; its ledger keeps sigma"),
        # range_counts (privacy.ranges) looks its sensitivity up in its own module: patch it there
        range_game(plant=plant_patch(NODE, privacy_ranges, "range_sensitivity", _sensitivity_of_d),
                   tag=" (planted: sensitivity sqrt d)", runs_factor=20,  # a factor sqrt 2: 6,000 runs at --quick
                   bug="privacy.ranges.range_sensitivity returns sqrt(d) (sqrt(d + 1) with labels) for sqrt(2d): "
                       "the noise and the event's Delta both too small for the 2d counts one record moves"),
        range_game(plant=plant_patch(NODE, gossip_mechanism, "range_counts", _weighted_range_counts),
                   tag=" (planted: counts weighted by magnitude)",
                   bug="a value counts clip(abs(x), 1, 2), not 1: one record moves each count by up to 2, "
                       "a premise of Delta fails"),
    ]


__all__ = ["range_game", "range_plants", "releases", "exact_counts"]
