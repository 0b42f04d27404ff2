"""Issue 26: every audited run of a worst-case game is a fresh fit whose rounds start at 0, so a bug tied to a round
of the fit fires in every run — the quick audit catches round 1's noise reused in round 2 — and the honest row
of the same game stays below its claim."""

from __future__ import annotations

import numpy as np
import pytest

from dpadmm.backends import PartySpec
from dpadmm.experiments import audit_games as AG
from dpadmm.experiments.audit_games_vertical import vertical_game, vertical_plants
from dpadmm.experiments.audit_plants import plant_reuse_round
from dpadmm.protocol import Protocol
from dpadmm.experiments.audit_worst_case import games

QUICK_RUNS = 300  # dpadmm audit --end-to-end --quick (× the game's runs_factor)


def test_each_audited_run_is_a_fresh_fit_with_rounds_from_0():
    game = vertical_game("record")
    rec = AG._play(game, 0, 3, seed=5)
    assert len(rec["trials"]) == 3 and rec["total"] == 3 * game.rounds
    for trial in rec["trials"]:
        rounds = [m.round for m in trial["streams"]["hub->party2"]]
        assert rounds == list(range(game.rounds))  # every fit numbers its rounds from 0
        assert len(trial["events"]) == game.rounds
    shares = [np.asarray(t["streams"]["party2"][0].share) for t in rec["trials"]]
    assert not np.allclose(shares[0], shares[1])  # each fit has its own noise
    assert len(rec["streams"]["party2"]) == rec["total"] == len(rec["events"])


class _Inbox:
    def __init__(self, t):
        self.round = t


def _no_setup():
    return None, None


def test_the_round_reuse_plant_fires_in_round_2_of_every_fit_only():
    seen = []

    def step(cfg, state, inbox, *, rng):
        seen.append((inbox.round, np.asarray(rng.standard_normal(3))))
        return state, None, []

    plain = Protocol("plain", _no_setup, step)
    party = PartySpec.of(plain, "p", plain.setup_type())
    for fit in range(2):  # two fits: a fresh plant each (as _engine_run makes one per run)
        specs, _, _ = plant_reuse_round("p", 1, 2)([party], None)
        for t in range(4):
            specs[0].step(None, None, _Inbox(t), rng=np.random.default_rng(10 * fit + t))
    by_fit = [seen[:4], seen[4:]]
    for fit in by_fit:
        assert [t for t, _ in fit] == [0, 1, 2, 3]
        np.testing.assert_array_equal(fit[1][1], fit[2][1])  # round 2 replays round 1's draw ...
        assert not np.allclose(fit[0][1], fit[1][1]) and not np.allclose(fit[2][1], fit[3][1])  # ... and only it
    assert not np.allclose(by_fit[0][1][1], by_fit[1][1][1])  # each fit its own draw


@pytest.mark.slow
def test_quick_audit_catches_round_1_noise_reused_in_round_2_and_the_honest_row_holds():
    planted = next(g for g in games(quick=True) if "round 1's draw reused in round 2" in g.name)  # in --quick
    assert planted.broken and planted.name in {g.name for g in vertical_plants("record")}
    bug = AG.play(planted, runs=QUICK_RUNS)
    assert bug.broken and bug.caught and bug.epsilon_lower_bound > bug.epsilon_claimed, bug.details
    honest = AG.play(vertical_game("record"), runs=QUICK_RUNS)
    assert not honest.caught and honest.epsilon_lower_bound <= honest.epsilon_claimed, honest.details
