"""The gossip schedule's two regimes (``algorithms/gossip/schedule.py``): the GDP μ behind the rule is the PLD
accountant's, a signal-rich run takes the most rounds that keep the per-round noise ≤ κ with η = 2/L and a tail
mean, a noise-limited run keeps the earlier defaults, and the fitted model is the tail mean of the broadcasts."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest

from dpadmm.algorithms.gossip.report import noise_multiplier_for
from dpadmm.algorithms.gossip.schedule import (KAPPA, MARGIN_CAP, MAX_RICH_ROUNDS, NOISY_MOMENTUM, margin_noise, average_from, default_rounds, default_schedule,
                                               gdp_mu, round_noise)
from dpadmm.algorithms.gossip import driver as gossip_driver
from dpadmm.algorithms.gossip.params import GossipParams
from dpadmm.data.graphs import Nodes


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 5.0])
def test_gdp_mu_gives_the_pld_accountants_noise_multiplier(epsilon):
    for T in (20, 200):
        z = noise_multiplier_for(epsilon, 1e-5, [1.0] * T)
        assert math.sqrt(T) / gdp_mu(epsilon, 1e-5) == pytest.approx(z, rel=1e-3)


def test_a_large_table_is_signal_rich_with_the_most_rounds_under_kappa():
    n, d, N = 22_524, 8, 5  # AER::CPS1988's training rows, one-hot columns, a 5-node ring
    s = default_schedule(n, d, 1.0, n_nodes=N)
    assert s.regime == "signal-rich" and s.step_scale == 2.0 and s.tail == 0.75
    assert default_rounds(n, d, 1.0) < s.rounds < MAX_RICH_ROUNDS  # more rounds than the noise-limited rule
    mu, L = gdp_mu(1.0, 1e-5), (d + 1) / 4 + 1e-4
    assert round_noise(n, d, N, s.rounds, 14, mu, math.sqrt(d), 2 / L) <= KAPPA
    assert round_noise(n, d, N, s.rounds + 1, 14, mu, math.sqrt(d), 2 / L) > KAPPA
    assert default_schedule(n, d, 5.0, n_nodes=N).rounds == MAX_RICH_ROUNDS


def test_a_small_imbalanced_table_keeps_the_noise_limited_defaults():
    n, d = 4_768, 3  # DAAG::cricketer: 1.9% positive; the longer schedule was worse than its base rate at ε = 1
    for eps in (1.0, 2.0):
        s = default_schedule(n, d, eps, n_nodes=5)
        assert s == (default_rounds(n, d, eps), 1.0, 0.0, "noise-limited", NOISY_MOMENTUM)
    assert default_schedule(n, d, None, n_nodes=5).regime == "non-private"
    assert default_schedule(n // 5, 8, 1.0, n_nodes=1).regime == "noise-limited"  # one node of CPS1988 alone


def test_the_model_is_the_tail_mean_of_the_broadcasts():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 3))
    y = np.where(X @ np.array([1.0, -1.0, 0.5]) + rng.normal(size=600) > 0, 1.0, -1.0)
    parts = np.array_split(np.arange(600), 3)
    nodes = Nodes([X[i] for i in parts], [y[i] for i in parts], nx.cycle_graph(3))
    res = gossip_driver.fit(GossipParams(epsilon=2.0, rounds=12, tail=0.5, bounds=(np.full(3, -4.0), np.full(3, 4.0)),
                                         recalibrate=False), nodes, noise_seed=1)
    s0 = average_from(12, 0.5)
    assert s0 == 6
    np.testing.assert_allclose(res.F.mean(axis=0), res.path[s0:].mean(axis=0), rtol=1e-12, atol=1e-14)
    last = gossip_driver.fit(GossipParams(epsilon=2.0, rounds=12, tail=0.0, bounds=(np.full(3, -4.0), np.full(3, 4.0)),
                                          recalibrate=False), nodes, noise_seed=1)
    np.testing.assert_allclose(last.F.mean(axis=0), last.path[-1], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("n,d,N", [(4_658, 85, 5), (1_169, 55, 3), (22_524, 8, 5), (1_380, 8, 5)])
def test_more_epsilon_never_buys_a_noisier_model(n, d, N):
    """ISLR::Caravan's shape (4,658 rows, 85 columns): the κ rule alone gave 158 rounds at ε = 5 with margin noise
    M = 0.43 (the test loss worse than the base rate), 400 at ε = 10; modeldata::attrition's (1,169 rows, 55
    columns, 3 nodes) likewise. The signal-rich schedule keeps M ≤ MARGIN_CAP, its rounds grow with ε and its M
    never grows with ε."""
    R, prev_T, prev_M = math.sqrt(d), 0, math.inf
    L = (d + 1) / 4 + 1e-4
    for eps in (0.5, 1.0, 2.0, 5.0, 10.0, 50.0, 500.0):
        s = default_schedule(n, d, eps, n_nodes=N)
        assert s.rounds >= prev_T
        prev_T = s.rounds
        if s.regime == "signal-rich":
            M = margin_noise(n, d, N, s.rounds, 14, gdp_mu(eps, 1e-5), R, s.step_scale / L, s.momentum)
            assert M <= MARGIN_CAP * (1 + 1e-9) and M <= prev_M * (1 + 1e-9)
            prev_M = M
    assert default_schedule(n, d, 500.0, n_nodes=N).rounds == MAX_RICH_ROUNDS
