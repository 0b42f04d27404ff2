"""The M-ADMM fallback's two pure-DP releases at a node — the count of its positive labels and the model-vs-base-rate
loss difference (``algorithms.consensus.baseline``) — add the Laplace noise their events' ε states: scale 1/ε for the
count (Δ₁ = 1), Δ/ε for the difference (Δ = L + log 2 − log p_min). The default audits check the M-ADMM penalty
perturbation; this checks these two: over independent generators, Σ|noise|/b of k releases is Gamma(k, 1) (two-sided,
false failure ≤ 10⁻⁶ per stage, the test seeded)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import gamma

from dpadmm.algorithms.consensus import baseline as cb

RELEASES, FALSE_FAILURE = 3000, 1e-6


def _node():
    rng = np.random.default_rng(4)
    X, y = rng.normal(size=(40, 3)), np.where(rng.random(40) < 0.3, 1.0, -1.0)
    return cb.setup_node("node0", X, y, eps_count=0.7, eps_compare=0.4)[0]


@pytest.mark.parametrize("stage", ["count", "compare"])
def test_each_fallback_release_has_its_stated_laplace_noise(stage):
    cfg = _node()
    req = (cb.Request("count") if stage == "count" else
           cb.Request("compare", f=np.array([0.5, -1.0, 2.0]), p=0.3, margin_clip=cb.MARGIN_CLIP, p_min=cb.P_MIN))
    if stage == "count":
        exact, b = float(np.count_nonzero(cfg.y > 0)), 1.0 / cfg.eps_count
    else:
        exact = float(cb.loss_difference(req.f, cfg.X, cfg.y, req.p, req.margin_clip, req.p_min).sum())
        b = cb.compare_sensitivity(req.margin_clip, req.p_min) / cfg.eps_compare
    total = 0.0
    for s in range(RELEASES):
        _, out, (event,) = cb.node_step(cfg, (), req, rng=np.random.default_rng([13, s]))
        assert event.epsilon == (cfg.eps_count if stage == "count" else cfg.eps_compare)
        total += abs(out.value - exact) / b
    lo, hi = gamma.ppf(FALSE_FAILURE / 2, RELEASES), gamma.isf(FALSE_FAILURE / 2, RELEASES)
    assert lo <= total <= hi, (stage, total / RELEASES)
