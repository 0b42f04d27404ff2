"""KKT reconstruction attack [Zhang, §6.2, App. E]."""

from __future__ import annotations

import numpy as np
import pytest

from dpadmm.attacks import kkt_reconstruct


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_attack_succeeds_only_with_public_eta_and_no_noise(seed):
    # the configuration of `dpadmm reproduce zhang-attack` (2,000 Adult rows, 5-node ring, T = 100,
    # private eta_i(t) = 0.55 * 1.1^(t-1), attacker's guess theta = 0.5). NB: with a private eta closer to
    # theta (growth 1.03) or smaller nodes / shorter runs the eta-private attacker can still succeed.
    from dpadmm.attacks import KKTAttackResult
    from dpadmm.experiments.zhang import attack_table

    res = {r["scenario"]: KKTAttackResult(**r) for r in attack_table(samples=2000, iterations=100, seed=seed)}
    pub = res["eta public, no noise"]
    assert pub.cosine >= 0.9 and pub.rank == 1  # recovered up to scale, best match among all training points
    for key in ("eta private, no noise", "eta public, PP noise"):
        r = res[key]
        # "fails": far below the >= 0.9 of the public-eta attack, and the true point is not identifiable among
        # the 2,000 candidates (if the attack were at chance, rank <= 10 would happen with probability 0.5%)
        assert r.cosine < 0.5 and r.rank > 10, r


def test_reconstruction_fails_without_the_target_signal():
    # a test of the attack: with the target's contribution removed the estimate is not x_1
    rng = np.random.default_rng(0)
    d, T = 6, 5
    path = rng.normal(size=(T, 3, d))
    X = rng.uniform(0, 0.4, size=(10, d))
    y = np.where(rng.random(10) < 0.5, 1.0, -1.0)
    x_hat = kkt_reconstruct(X_known=X[1:], y_known=y[1:], path=path, node=0, neighbours=[1, 2], C=1.0, reg=0.1,
                            theta=0.5, eta=0.5, n_samples=10)
    assert np.isclose(np.linalg.norm(x_hat), 1.0)
