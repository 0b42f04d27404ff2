"""Label DP for counts (``privacy/label_counts.py``): the ε the release claims recomputes from what it drew, its outputs
follow the stated probabilities and are positive, the DP bound covers its quantile, the audit game's honest row reaches
half its claim and its plants are caught, and bad inputs are refused. Mirrors ``test_label_mechanisms.py`` (the
real-valued release); the same tolerances: seeded checks whose false-failure rate for a fresh seed is 1e-6."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import chi2

from dpadmm.experiments.audit_games import play
from dpadmm.experiments.audit_games_label_rr import label_rr_game, label_rr_plants
from dpadmm.privacy import label_counts as lc
from dpadmm.privacy import label_mechanisms as lm
from dpadmm.privacy.events import LABEL_CHANGE
from dpadmm.privacy.ledger import PrivacyLedger

from test_label_mechanisms import Z, epsilon_from_keep_rate


def _truth(rel, y):
    """Φ of each row's clipped count: the value randomized response keeps with probability e^ε/(e^ε + k − 1)."""
    m = rel.edges.size - 1
    bins = np.clip(np.searchsorted(rel.edges, np.minimum(y, rel.label_range[1]), side="right") - 1, 0, m - 1)
    return rel.outputs[rel.assign[bins]], bins


def test_rr_on_counts_epsilon_recomputes_from_the_draws_and_the_events_add_up():
    rng = np.random.default_rng(2)
    n = 100_000
    y = rng.negative_binomial(1, 0.15, size=n).astype(np.float64)  # mean 5.7, long tail
    rel = lc.rr_on_counts(y, 4.0, rng=rng)  # DP bound, prior, randomized response
    assert [e.round for e in rel.events] == [-2, -1, 0] and all(e.relation is LABEL_CHANGE for e in rel.events)
    ledger = PrivacyLedger()
    ledger.record(rel.events)
    assert ledger.pure_epsilons()["coordinator"] == pytest.approx(4.0)
    k = rel.outputs.size
    assert k >= 3 and np.all(rel.outputs > 0) and np.all(rel.labels > 0)
    truth, bins = _truth(rel, y)
    eps_hat, se = epsilon_from_keep_rate(rel.labels == truth, k)
    assert abs(eps_hat - rel.epsilons["rr"]) < Z * se, (eps_hat, rel.epsilons["rr"], se)
    m = rel.edges.size - 1
    exact = np.bincount(bins, minlength=m)
    b = 2 / rel.epsilons["prior"]
    assert abs(np.mean(np.abs(rel.noisy_counts - exact)) - b) < Z * b / math.sqrt(m)


def test_rr_on_counts_outputs_follow_the_stated_probabilities():
    """Declared bound U = 12 (unit bins on 0 … 12, Φ fixed per run): the released outputs of the rows of each true
    output j are multinomial with ``e^ε/Z`` on j and ``1/Z`` on every other (χ² at 1e-6/k per class)."""
    rng = np.random.default_rng(3)
    y = rng.poisson(4.0, size=60_000).astype(np.float64)
    rel = lc.rr_on_counts(y, 3.0, rng=rng, upper=12, n_bins=32)
    assert len(rel.events) == 2 and rel.label_range == (0.0, 12.0)  # a declared bound costs nothing
    assert np.array_equal(rel.edges, np.arange(14) - 0.5)
    k, eps_rr = rel.outputs.size, rel.epsilons["rr"]
    assert k >= 3
    truth, _ = _truth(rel, y)
    true_j, out_j = np.searchsorted(rel.outputs, truth), np.searchsorted(rel.outputs, rel.labels)
    Zk = math.exp(eps_rr) + k - 1
    for j in np.unique(true_j):
        rows = out_j[true_j == j]
        p = np.full(k, 1.0 / Zk)
        p[j] = math.exp(eps_rr) / Zk
        expected = rows.size * p
        stat = float(np.sum((np.bincount(rows, minlength=k) - expected) ** 2 / expected))
        assert stat < chi2.isf(1e-6 / k, k - 1), (j, stat)


def test_a_huge_epsilon_releases_each_count_as_itself_up_to_the_grid():
    """Zero noise: at ε = 1000 every count keeps its own bin's output; on unit bins the Poisson-optimal output of a
    bin {c} is c itself, up to the public grid's step (U/(4(U + 1))) and its positive floor for c = 0."""
    rng = np.random.default_rng(4)
    y = rng.poisson(3.0, size=2000).astype(np.float64)
    rel = lc.rr_on_counts(y, 1000.0, rng=rng, upper=10)
    truth, _ = _truth(rel, y)
    assert np.array_equal(rel.labels, truth)
    assert np.max(np.abs(rel.labels - np.minimum(y, 10))) <= 10 / 44 + 1e-12


def test_dp_count_upper_covers_its_quantile():
    """AboveThreshold stops at grid point t_j with ``f_j + ν_j ≥ qn + ν_T`` and ``f_i + ν_i < qn + ν_T`` for i < j
    (ν ~ Lap(4/ε), ν_T ~ Lap(2/ε)). At n = 20,000, ε = 0.2 (scales 20 and 10), every |ν| ≤ 500 and |ν_T| ≤ 250 but
    with probability ≤ 394·e^−25: then f_j ≥ qn − 750 (t_j is at least the count of rank qn − 750) and t_{j−1} has
    f < qn + 750 (t_j is at most the first grid point at or above the count of rank qn + 750). U = ⌈1.5 t_j⌉."""
    rng = np.random.default_rng(5)
    y = np.sort(rng.negative_binomial(1, 0.1, size=20_000).astype(np.float64))
    q = int(lc.COUNT_QUANTILE * y.size)
    for seed in range(5):
        upper = lc.dp_count_upper(y, 0.2, np.random.default_rng(seed))
        top = lc.COUNT_GRID[np.searchsorted(lc.COUNT_GRID, y[q + 750])]
        assert lc.COUNT_WIDEN * y[q - 751] <= upper <= math.ceil(lc.COUNT_WIDEN * top), (upper, y[q - 751], top)
    few = rng.poisson(3.0, size=1000)  # at a thousand rows it stays near the data (the exponential mechanism did not)
    assert max(lc.dp_count_upper(few, 0.1, np.random.default_rng(s)) for s in range(20)) <= math.ceil(1.5 * (few.max() + 1))


@pytest.mark.parametrize("call, match", [
    (lambda: lc.rr_on_counts(np.array([1.0, np.nan]), 1.0, rng=np.random.default_rng(0)), "finite"),
    (lambda: lc.rr_on_counts(np.array([1.0, -2.0]), 1.0, rng=np.random.default_rng(0)), "non-negative integers; got -2"),
    (lambda: lc.rr_on_counts(np.array([1.0, 2.5]), 1.0, rng=np.random.default_rng(0)), "got 2.5"),
    (lambda: lc.rr_on_counts(np.ones(3), 1.0, rng=np.random.default_rng(0), upper=0), "upper must be an integer"),
    (lambda: lc.rr_on_counts(np.ones(3), 1.0, rng=np.random.default_rng(0), upper=2.5), "upper must be an integer"),
    (lambda: lc.rr_on_counts(np.ones(3), 0.0, rng=np.random.default_rng(0)), "epsilon > 0"),
    (lambda: lc.rr_on_counts(np.ones(3), 1.0, rng=np.random.default_rng(0), n_bins=1), "n_bins"),
])
def test_bad_inputs_are_refused_with_the_reason(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_the_audit_games_honest_row_reaches_half_its_claim_and_stays_below_it():
    """1,000 runs per side: the 95% Clopper–Pearson bound is in [0.5, 1] of the claim (measured 0.76 at 2,000)."""
    res = play(label_rr_game("rr-counts"), runs=50)
    assert res.epsilon_claimed == pytest.approx(1.0) and res.delta == 0.0
    assert 0.5 <= res.epsilon_lower_bound <= 1.0, res.details["statistics"]


@pytest.mark.parametrize("game", [g for g in label_rr_plants() if "rr-counts" in g.name],
                         ids=lambda g: g.name.removeprefix("worst-case label-"))
def test_the_audit_games_plants_are_caught(game):
    """Half the change probability (every uniform the release draws ×½) or the change probability at 2ε: the bound
    exceeds the claim (measured 1.58–1.60 at 1,000 runs per side). The plant is undone after the run."""
    before = lm.change_probability
    res = play(game, runs=50)
    assert res.caught and res.epsilon_lower_bound > 1.2 * res.epsilon_claimed, res.details["statistics"]
    assert lm.change_probability is before
