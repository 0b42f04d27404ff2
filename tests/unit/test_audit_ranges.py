"""The worst-case game of the gossip DP column range (``experiments/audit_games_ranges.py``): what the hub reads is
the node's counts exactly, the canary moves every round's counts by its full sensitivity, the honest row stays below
its claim and reaches at least half of it, and every plant is caught."""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest

from dpadmm.algorithms.gossip import mechanism as gossip_mechanism
from dpadmm.algorithms.gossip import node as gossip_node
from dpadmm.experiments import audit_games as AG
from dpadmm.experiments import audit_games_ranges as RG
from dpadmm.experiments.audit_plants import _wrap_step
from dpadmm.experiments.audit_worst_case import games
from dpadmm.privacy import ranges as privacy_ranges

QUICK_RUNS = 300  # dpadmm audit --end-to-end --quick (× the game's runs_factor)
HONEST = "worst-case gossip-range"
BUGS = ["noise x1/2", "sensitivity sqrt d", "counts weighted by magnitude"]


def _game(name):
    """The row of that name as the module builds it (registered in ``games()``: the first test)."""
    return next(g for g in [RG.range_game()] + RG.range_plants() if g.name == name)


def _noiseless(plant=None):
    """The node's generator draws zeros (after ``plant``, if any): its releases are its exact counts."""
    def wrap(specs, hub):
        ctx = contextlib.nullcontext()
        if plant is not None:
            specs, hub, ctx = plant(specs, hub)
        return _wrap_step(specs, RG.NODE, lambda rng, inbox: AG.ZeroRNG()), hub, ctx
    return wrap


def test_the_game_and_its_plants_are_audit_rows_also_at_quick():
    rows = {g.name: g for g in games(quick=True)}
    assert {HONEST} | {f"{HONEST} (planted: {b})" for b in BUGS} <= set(rows)
    assert not rows[HONEST].broken and all(rows[f"{HONEST} (planted: {b})"].broken for b in BUGS)


@pytest.mark.parametrize("side", [0, 1])
def test_the_view_of_a_noiseless_run_is_the_replay_of_its_side(side):
    """Without noise the counts the hub reads are the replayed counts of that side, exactly; the other side's are
    one away in every count (and the positive count, round 1): ``√(2d + 1)`` then ``√(2d)``, each round's Δ, and
    every event's σ/Δ is the multiplier calibrated for the K releases."""
    game = RG.range_game(plant=_noiseless())
    rec = AG._play(game, side, 2, seed=3)
    X, mu0, mu1 = AG._seen(game, side, rec)
    np.testing.assert_array_equal(X, mu1 if side else mu0)
    delta = [math.sqrt(2 * RG.R_D + 1)] + [math.sqrt(2 * RG.R_D)] * (RG.R_K - 1)
    np.testing.assert_allclose(np.linalg.norm(mu1 - mu0, axis=-1)[:, 0], delta * 2, rtol=1e-12)
    assert np.all(np.abs(mu1 - mu0)[:, 0, :2 * RG.R_D] == 1.0)
    ev = rec["events"][:RG.R_K]
    assert [e.round for e in ev] == [1, 2, 3, 4]
    np.testing.assert_allclose([e.sensitivity for e in ev], delta, rtol=1e-12)
    np.testing.assert_allclose([e.sigma / e.sensitivity for e in ev], AG.calibrated_nm(RG.R_K), rtol=1e-12)


def test_the_plants_break_the_premise_they_name():
    """Noiselessly: the under-stated sensitivity prices a √(2d) move at √d (the event says so, the view is honest);
    the weighted count moves every count by 2 (the view is 1 off the replay of D: the canary counts twice)."""
    sens, weighted = (_game(f"{HONEST} (planted: {b})") for b in BUGS[1:])
    game = RG.range_game(plant=_noiseless(sens.plant))
    rec = AG._play(game, 0, 1, seed=0)
    X, mu0, _ = AG._seen(game, 0, rec)
    np.testing.assert_array_equal(X, mu0)
    np.testing.assert_allclose([e.sensitivity for e in rec["events"]],
                               [math.sqrt(RG.R_D + 1)] + [math.sqrt(RG.R_D)] * (RG.R_K - 1), rtol=1e-12)
    for side in (0, 1):
        game = RG.range_game(plant=_noiseless(weighted.plant))
        rec = AG._play(game, side, 1, seed=0)
        X, mu0, mu1 = AG._seen(game, side, rec)
        expected = mu0.copy()
        expected[:, 0, :2 * RG.R_D] += 1.0 - side  # on D the canary (−10³ ≤ 0) counts 2 in every count
        np.testing.assert_array_equal(X, expected if side == 0 else mu1)


def test_honest_residuals_are_standard_normal_and_not_under_the_half_noise_plant():
    """Honest runs: the residuals (view − the replayed counts of the side played) over σ are standard normal — every
    count of every round and the positive count of round 1, 50 runs per side (mean within 5/√n of 0, spread within
    5% of 1); the claim is ε = 1 over the four releases. With the noise halved their spread is 1/2. Playing a plant
    patches nothing permanently."""
    before = (privacy_ranges.range_sensitivity, gossip_mechanism.range_counts, gossip_node.node_step)
    for game, spread in ((_game(HONEST), 1.0), (_game(f"{HONEST} (planted: noise x1/2)"), 0.5)):
        for side in (0, 1):
            rec = AG._play(game, side, 50, seed=11 + side)
            X, mu0, mu1 = AG._seen(game, side, rec)
            eps, sig = AG._claim(game, rec["events"])
            assert eps == pytest.approx(1.0, rel=1e-3) and len(sig) == 50 * RG.R_K
            res = (X - (mu1 if side else mu0))[:, 0, :] / sig[:, None]
            r = np.concatenate([res[:, :2 * RG.R_D].ravel(), res[::RG.R_K, 2 * RG.R_D]])
            assert abs(r.mean()) < 5 / math.sqrt(r.size) and abs(r.std() / spread - 1.0) < 0.05, (r.mean(), r.std())
    for plant in RG.range_plants():
        AG._play(plant, 0, 1, seed=0)
    assert (privacy_ranges.range_sensitivity, gossip_mechanism.range_counts, gossip_node.node_step) == before


@pytest.mark.slow
@pytest.mark.parametrize("bug", BUGS)
def test_range_plants_are_caught_at_the_quick_run_count(bug):
    game = next(g for g in games(quick=True) if g.name == f"{HONEST} (planted: {bug})")  # with its max_runs
    res = AG.play(game, runs=QUICK_RUNS)
    assert res.broken and res.caught and res.epsilon_lower_bound > res.epsilon_claimed, res.details["statistics"]


@pytest.mark.slow
def test_honest_range_row_reaches_half_its_claim_at_the_default_run_count():
    """At the default 2,000 runs (10,000 per side), ratio limit 1."""
    res = AG.play(_game(HONEST), runs=2000)
    assert 0.5 * res.epsilon_claimed <= res.epsilon_lower_bound <= res.epsilon_claimed, res.details["statistics"]
