"""A refused run's fix names its cause (issue 40, item 5): a spent budget, one release already over what is left
(not "declare fewer rounds"), or the declared rounds."""

from __future__ import annotations

import pytest

from dpadmm.privacy.accountants.gaussian import gaussian_epsilon
from dpadmm.privacy.party_ledger import PartyBudget
from dpadmm.privacy.policy import PolicyRefusal, RunPrice

DELTA = 1e-5


@pytest.fixture
def data(tmp_path):
    f = tmp_path / "train.csv"
    f.write_text("id,a\n1,0.5\n2,0.25\n")
    return {"train": str(f)}


def _refusal(budget, nm: float, releases: int, rounds: int) -> str:
    with pytest.raises(PolicyRefusal) as exc:
        budget.open_run("r", "x", RunPrice({nm: releases}, 0.0, "record_replace"), rounds)
    return str(exc.value)


def test_one_release_over_the_cap_asks_for_more_noise_not_fewer_rounds(tmp_path, data):
    cap = gaussian_epsilon([4.0], DELTA) * 1.5  # one release at σ = 4 fits; one at σ = 1 does not
    b = PartyBudget(tmp_path / "o", "p", cap, DELTA, data=data)
    msg = _refusal(b, 1.0, 1, 1)
    assert "its one release alone" in msg and "fewer rounds cannot help" in msg and "more noise" in msg
    assert "declare fewer rounds" not in msg
    msg = _refusal(b, 1.0, 10, 10)  # ten rounds at σ = 1: one of them is already over
    assert "a single round's releases alone" in msg and "declare fewer rounds" not in msg
    b.close()


def test_too_many_rounds_asks_for_fewer_rounds(tmp_path, data):
    cap = gaussian_epsilon([4.0] * 3, DELTA)  # three releases at σ = 4 fit, ten do not
    b = PartyBudget(tmp_path / "o", "p", cap, DELTA, data=data)
    assert _refusal(b, 4.0, 10, 10).endswith("declare fewer rounds or more noise")
    b.close()


def test_a_spent_budget_says_so(tmp_path, data):
    from dpadmm.privacy.events import RECORD_REPLACE, GaussianRelease

    cap = gaussian_epsilon([4.0] * 2, DELTA) * 1.0001
    b = PartyBudget(tmp_path / "o", "p", cap, DELTA, data=data)
    b.open_run("first", "x", RunPrice({4.0: 2}, 0.0, "record_replace"), 2)
    for t in range(2):
        b.charge([GaussianRelease("p", t, 1.0, 4.0, RECORD_REPLACE)], private_step=True, round_=t)
    b.close()
    b = PartyBudget(tmp_path / "o2", "p", gaussian_epsilon([4.0] * 2, DELTA) * 0.999, DELTA, data=data)
    msg = _refusal(b, 4.0, 1, 1)
    assert "its budget is spent" in msg and "declare fewer rounds" not in msg and "fewer rounds cannot" not in msg
    b.close()
