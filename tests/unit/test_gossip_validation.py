"""The gossip shared model's DP validation against the DP base rate (algorithms/gossip/validation.py, issue 38)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpadmm import ConsensusLogisticRegression
from dpadmm.algorithms.consensus.baseline import MARGIN, MARGIN_CLIP, P_MIN, loss_difference
from dpadmm.algorithms.gossip import validation as val
from dpadmm.exceptions import InvalidParameterError
from dpadmm.algorithms.gossip.params import GossipParams, plan


@pytest.mark.parametrize("p", [P_MIN, 0.05, 0.3, 0.5, 0.77, 1 - P_MIN])
def test_every_loss_difference_lies_in_one_interval_of_length_delta(p):
    """Δ = L + |logit p|: over every clipped margin and both labels the per-record differences span exactly Δ."""
    s = np.linspace(-50, 50, 20001)  # margins beyond ±L are clipped by loss_difference
    X = np.column_stack([s, np.ones_like(s)])
    w = np.array([1.0, 0.0])
    d = np.concatenate([loss_difference(w, X, np.full_like(s, yv), p, MARGIN_CLIP, P_MIN) for yv in (-1.0, 1.0)])
    span = d.max() - d.min()
    assert span <= val.validation_sensitivity(p) + 1e-12
    assert span == pytest.approx(val.validation_sensitivity(p), rel=1e-6)  # tight: no slack in the noise


def test_a_model_no_better_than_the_constant_is_handed_over_rarely():
    """P(sum of N Laplace draws < −MARGIN sd) ≤ 3.1% for N = 1…16 (0.5·e^{−2√2} = 2.96% at N = 1; Φ(−2) as N grows)."""
    rng = np.random.default_rng(0)
    assert 0.5 * math.exp(-MARGIN * math.sqrt(2)) == pytest.approx(0.0296, abs=1e-4)
    for N in range(1, 17):
        S = rng.laplace(0.0, 1.0, size=(200_000, N)).sum(axis=1)
        assert np.mean(S < -MARGIN * math.sqrt(2.0 * N)) <= 0.031, N


def test_the_slice_is_split_publicly_and_sums_to_it():
    for eps, n in [(0.1, 1380), (1.0, 13_649), (10.0, 500), (0.05, 200_000)]:
        b, c = val.split(eps, n, 5)
        assert b + c == pytest.approx(eps) and 0.25 * eps - 1e-12 <= b <= 0.75 * eps + 1e-12


def test_the_rounds_get_the_rest_of_epsilon():
    full = plan(GossipParams(epsilon=1.0, validation_share=0.0), 2000, 4, 5)
    part = plan(GossipParams(epsilon=1.0), 2000, 4, 5)
    same = plan(GossipParams(epsilon=0.8, validation_share=0.0), 2000, 4, 5)
    assert part.noise_multiplier > full.noise_multiplier and part.noise_multiplier == pytest.approx(same.noise_multiplier)
    with pytest.raises(InvalidParameterError, match="validation_share must be in"):
        GossipParams(epsilon=1.0, validation_share=1.0)


def _table(seed, n=1380, n_test=4000):
    r = np.random.default_rng(seed)
    X = r.normal(size=(n + n_test, 8)) * np.array([1, 10, 100, 1, 1, 5, 1, 2.0]) + 50
    y = (r.random(n + n_test) < 1 / (1 + np.exp(-(0.3 * (X[:, 0] - 50) - 0.6)))).astype(int)
    return X[:n], y[:n], X[n:], y[n:]


def _ce(y, p):
    p = np.clip(p, 1e-12, 1 - 1e-12)
    return float(-np.mean(np.where(y > 0, np.log(p), np.log1p(-p))))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_shared_model_on_a_small_table_is_never_worse_than_the_base_rate(seed):
    """1,380 rows over 5 nodes at ε = 0.5, where the consensus model was worse than the base rate (on a0246c6: test
    log loss 0.87, 0.72, 0.82 against base rates 0.66, 0.66, 0.65): the shared model handed over is now the DP base rate, or a
    model that won the DP comparison. Tolerance, derived: the DP base rate is the Laplace count (sd √(2N)/ε_b) combined
    with the range rounds' count as released (unbiased, unclipped), whose variance only shrinks it; beyond 4 sd with
    probability < 0.4%, so the handed-over constant costs at most the worst constant in q_train ± 4 sd on the test
    rows."""
    X, y, Xt, yt = _table(seed)
    m = ConsensusLogisticRegression(epsilon=0.5, n_nodes=5, random_state=seed).fit(X, y)
    rep = m.privacy_
    assert rep.epsilon <= 0.5 + 1e-9
    pure = m._gossip_ledger.pure_epsilons()
    assert pure == pytest.approx({f"node{i}": 0.5 * val.VALIDATION_SHARE for i in range(5)})
    loss = _ce(yt, m.predict_proba(Xt)[:, 1])
    q = y.mean()
    eps_b, _ = val.split(0.5 * val.VALIDATION_SHARE, len(y), 5)
    slack = 4 * math.sqrt(10) / eps_b / len(y)
    tol = max(_ce(yt, np.full(len(yt), q - slack)), _ce(yt, np.full(len(yt), q + slack)))
    if m.handed_over_ == "dp-base-rate":
        assert abs(m.dp_base_rate_ - q) <= slack and np.all(m.coef_ == 0)
    assert loss <= tol  # on a0246c6 seeds 0 and 2 fail it (0.87 > 0.70, 0.82 > 0.70)


def test_no_validation_without_noise():
    X, y, _, _ = _table(0, n=600, n_test=0)
    m = ConsensusLogisticRegression(protocol="gossip", n_nodes=3, random_state=0).fit(X, y)
    assert m.handed_over_ is None and m.privacy_ is None


def test_the_base_rate_combines_the_range_count_as_released(monkeypatch):
    """The range rounds' pooled positive count enters the DP base rate unclipped (issue 38): the rate behind the
    starting intercept is clipped to [sd/n, 1 − sd/n] — 1/2 here, where sd/n > 1/2 — and, weighed as if unbiased,
    pulled the DP base rate towards 1/2 (more at ε = 1 than at ε = 0.5 on modeldata::attrition: a worse hand-over with
    more ε on every seed). Here a prior of exactly n/2 is the clipped rate; the released count is a Gaussian draw."""
    seen = []
    keep = val.released_once
    monkeypatch.setattr(val, "released_once", lambda *a, **k: seen.append(k["prior"]) or keep(*a, **k))
    X, y, _, _ = _table(0, n=300, n_test=0)
    for seed in range(3):
        m = ConsensusLogisticRegression(epsilon=0.5, n_nodes=3, random_state=seed).fit(X, y)
        assert m.range_base_rate_ == 0.5  # the clipped rate: all noise at this size
        count, sd = seen[-1]
        assert count != pytest.approx(0.5 * len(y)) and sd > 0.5 * len(y)


@pytest.mark.parametrize("n, d, N", [(1169, 55, 3), (857, 15, 5), (20_003, 11, 5), (300, 2, 5), (100_000, 40, 2)])
def test_the_slice_is_capped_and_the_rounds_budget_grows_with_epsilon(n, d, N):
    """share·ε up to the least slice whose comparison resolves d nats, then flat: the rounds' ε = ε − slice grows with
    ε (more ε never leaves the rounds less); at the cap the split gives the comparison a threshold of exactly d nats
    over all rows at the worst sensitivity (2 noise sd of the pooled sum), and one slice less would not."""
    grid = [0.25, 0.5, 1, 2, 5, 10, 20, 50, 100, 1000]
    cuts = [val.slice_epsilon(e, val.VALIDATION_SHARE, n, N, d) for e in grid]
    assert all(c <= 0.2 * e + 1e-12 for c, e in zip(cuts, grid))
    assert np.all(np.diff(cuts) >= 0) and np.all(np.diff([e - c for e, c in zip(grid, cuts)]) > 0)
    cap = cuts[-1]
    assert cap < 0.2 * grid[-1]  # capped
    _, c = val.split(cap, n, N)
    assert -val.threshold(N, P_MIN, c) == pytest.approx(d, rel=1e-9)
    _, c = val.split(0.99 * cap, n, N)
    assert -val.threshold(N, P_MIN, c) > d


def test_a_capped_slice_is_what_the_ledger_books():
    """At ε = 50 on 600 rows the slice is the cap, the events sum to it and the report's ε is still ≤ ε."""
    X, y, _, _ = _table(1, n=600, n_test=0)
    m = ConsensusLogisticRegression(epsilon=50.0, n_nodes=3, random_state=0).fit(X, y)
    cut = val.slice_epsilon(50.0, val.VALIDATION_SHARE, 600, 3, X.shape[1])
    assert cut < 0.2 * 50.0
    assert m._gossip_ledger.pure_epsilons() == pytest.approx({f"node{i}": cut for i in range(3)})
    assert m.privacy_.epsilon <= 50.0 + 1e-6 and m.privacy_.epsilon == pytest.approx(50.0, rel=1e-4)
