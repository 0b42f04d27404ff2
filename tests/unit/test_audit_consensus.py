"""The worst-case consensus game (``experiments/audit_games_consensus.py``): the adversary's inversion of the
penalty-perturbed release is exact, the honest bound stays below the claim, and half the noise is caught."""

from __future__ import annotations

import numpy as np
import pytest

from dpadmm.algorithms.consensus import node as consensus_node  # where block_step draws its noise
from dpadmm.experiments.audit_games import play
from dpadmm.experiments.audit_games_consensus import (NODE, Z_ALPHA, Z_ETA, Z_REG, _b0, _grad, _records,
                                                      consensus_game, consensus_plants, log_likelihood_ratio)


def test_the_release_inverts_to_the_noise_the_node_drew():
    """Through the engine and the real block step: ε_D(f) = −(∇ℓ_D(f) + b₀ + (ρ/N + 2ηV)f)/(2ηV) equals the draw of
    ``graph_consensus._noise`` in every round (so the likelihood ratio the game scores is the exact one), and the
    neighbour's S keeps every release near f* = (20, 0)."""
    from dpadmm.experiments.audit_games import _play

    drawn = []
    real = consensus_node._noise

    def spy(rng, alpha, d):
        out = real(rng, alpha, d)
        drawn.append(out[0].copy())
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(consensus_node, "_noise", spy)
        rec = _play(consensus_game(), 0, 20, 3)
    F = np.stack([np.asarray(m.f, float)[0] for m in rec["streams"][NODE][:20]])
    X, _, y = _records()
    r = Z_REG + 2.0 * Z_ETA
    eps = np.stack([-(_grad(X, y, f) + _b0() + r * f) / (2.0 * Z_ETA) for f in F])
    np.testing.assert_allclose(eps, np.stack(drawn[:20]), atol=1e-7)
    assert np.all(np.abs(F[:, 0] - 20.0) < 5.0)
    assert rec["events"][0].epsilon == pytest.approx((0.35 + Z_ALPHA) / (Z_ETA * 4))  # C(1.4c1 + α)/(ηVB)


def test_likelihood_ratio_is_bounded_by_the_mechanisms_true_loss():
    """|log p_D'(f) − log p_D(f)| ≤ α‖Δε‖ + c₁C/(2ηVB) with ‖Δε‖ = C‖Δg‖/(2ηVB) ≤ 2C/(2ηVB): the game's
    statistic never claims more than the mechanism can lose, and it gets within 10% of the ε-part somewhere."""
    rng = np.random.default_rng(0)
    F = np.array([20.0, 0.0]) + rng.normal(scale=1.0, size=(4000, 2))
    llr = log_likelihood_ratio(F)
    sup = Z_ALPHA * 2.0 / (2 * Z_ETA * 4) + 0.25 / (2 * Z_ETA * 4)
    assert np.max(np.abs(llr)) <= sup
    assert np.max(np.abs(llr)) >= 0.9 * Z_ALPHA * 1.91 / (2 * Z_ETA * 4)


def test_honest_consensus_game_stays_below_its_claim():
    res = play(consensus_game(), runs=60)  # 300 runs per side
    assert res.epsilon_claimed == pytest.approx(0.98864, rel=1e-4) and res.delta == 0.0
    assert 0.0 <= res.epsilon_lower_bound <= res.epsilon_claimed and not res.caught


@pytest.mark.slow
def test_consensus_noise_halved_is_caught_at_the_quick_run_count():

    before = consensus_node._noise
    res = play(consensus_plants()[0], runs=300)  # 1,500 runs per side: bound ≈ 1.2 against 0.99
    assert res.caught, res.details
    assert consensus_node._noise is before
