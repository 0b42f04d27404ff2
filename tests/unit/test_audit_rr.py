"""The worst-case audit game of randomized-response labels (``experiments/audit_games_rr.py``): it plays the code
path a fit runs, its honest bound approaches the claim, and its plants are caught."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from dpadmm.experiments.audit_games import play
from dpadmm.experiments.audit_games_rr import rr_game, rr_plants


def test_a_fit_runs_on_exactly_the_release_the_audit_game_plays():
    """The game calls ``algorithms.vertical.driver.rr_labels``; a seeded fit's coordinator holds exactly its output (so a
    plant in the release function, or a change of the fit's path around it, is what the game sees)."""
    from dpadmm._validation import noise_seed
    from dpadmm.algorithms.vertical import coordinator as vs
    from dpadmm.estimators.vertical import VerticalLogisticRegression
    from dpadmm.algorithms.vertical.driver import rr_labels as _rr_labels

    rng = np.random.default_rng(0)
    X1, X2 = rng.normal(size=(60, 2)), rng.normal(size=(60, 2))
    y = np.where(X1[:, 0] > 0, 1, 0)
    seen = []
    real = vs.init_coordinator

    def spy(cfg, *a, **k):
        seen.append(np.asarray(cfg.labels, float).copy())
        return real(cfg, *a, **k)

    with warnings.catch_warnings(), pytest.MonkeyPatch.context() as mp:
        warnings.simplefilter("ignore")
        mp.setattr(vs, "init_coordinator", spy)
        est = VerticalLogisticRegression(label_epsilon=1.0, max_iter=3, random_state=7).fit([X1, X2], y)
    assert est.privacy_.label["mechanism"].startswith("randomized response")
    expected, events = _rr_labels(np.where(y == 1, 1.0, -1.0), 1.0, noise_seed(7), 2, None, None)
    assert seen and np.array_equal(seen[0], expected)
    assert not np.array_equal(expected, np.where(y == 1, 1.0, -1.0))  # ~27% of 60 labels flipped
    assert [e.epsilon for e in events] == [1.0]


def test_honest_rr_game_approaches_its_claim_and_stays_below_it():
    """2,000 runs per side: the 95% Clopper-Pearson bound is ≤ the claim and ≥ 0.7 of it. The observed flip rate of
    the canary has sd 0.0099 around q = 0.269; the bound drops below 0.7 only if it exceeds 0.305 (3.6 sd: false
    failure 2e-4) and exceeds 1 only if it falls below 0.242 (2.7 sd, the Bonferroni level: 3e-3)."""
    res = play(rr_game(), runs=100)
    assert res.epsilon_claimed == pytest.approx(1.0) and res.delta == 0.0
    assert 0.7 <= res.epsilon_lower_bound <= 1.0, res.details["statistics"]
    assert res.details["statistic"].startswith("likelihood-ratio")


@pytest.mark.parametrize("game", rr_plants(), ids=["double-epsilon", "shared-draw"])
def test_rr_plants_are_caught_with_few_runs(game):
    """2,000 runs per side: at 2ε the canary flips with probability 0.119 (bound ≈ 1.8); with one draw for every
    row the decoded statistic makes no error (bound ≈ 5.5)."""
    from dpadmm.algorithms.vertical import label as vl
    from dpadmm.backends import base

    before = (vl.flip_probability, base.party_rng)
    res = play(game, runs=100)
    assert res.caught and res.epsilon_lower_bound > 1.5 * res.epsilon_claimed, res.details["statistics"]
    assert (vl.flip_probability, base.party_rng) == before  # the plant is undone after the run


def test_decoded_statistic_finds_the_row_that_shares_the_canarys_draw():
    """Synthetic releases where row 5 reuses the canary's flip and the other rows flip independently: the decoding
    row is 5 and the decoded statistic separates the sides perfectly; independent flips give it no edge."""
    from dpadmm.experiments.audit_games_rr import _labels, rr_scores

    rng = np.random.default_rng(1)
    y, yb = _labels()
    q, R = 0.27, 400
    views = []
    for labels in (y, yb):
        f = rng.random((R, y.size)) < q
        f[:, 5] = f[:, 0]
        views.append(np.where(f, -labels, labels))
    s0, s1, j = rr_scores(views[0], views[1], y, yb)
    assert j == 5
    assert np.all(s0["decoded"] < 0) and np.all(s1["decoded"] > 0)
    assert 0.15 < np.mean(s0["likelihood-ratio"] > 0) < 0.4  # the canary alone: flipped with probability q
