"""The Gaussian label mechanisms add their stated noise to every part of their release, not only the part the audit
games look at.

- ``dpadmm vertical admm --label-epsilon`` (``label_private_step``): each round releases the pair (g + σZ, Σg + σZ′) — the
  noisy residuals sent to the parties and the noisy sum that moves the public intercept — at sensitivity √2·W. The
  audit game runs without an intercept, so halving Z′ alone (events unchanged) passed every default test.
- The encrypted protocol's ``label_mechanism="gaussian"`` (``open_gradients``): one release per round of every party's
  γ_m and the label party's own A₀ᵀĝ + η₀, at Δ_L = √(2R₀² + Σ_m R_m²); halving η₀ alone passed every default test.

Each noise, recovered from what the step returns on all-zero inputs, over the σ its event states, must be N(0, 1):
two-sided χ² (false failure ≤ 10⁻⁶ per part, the test seeded)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import chi2

from dpadmm.algorithms.encrypted import he, label as enc_label
from dpadmm.algorithms.encrypted.messages import EncryptedGradient
from dpadmm.algorithms.vertical import coordinator as vc, label as vl, messages as vm
from dpadmm.experiments.audit_games_encrypted import plaintext_he
from dpadmm.kernels.losses import get_loss

RELEASES, FALSE_FAILURE = 1500, 1e-6


def _chi2_ok(u) -> tuple[bool, float]:
    u = np.ravel(u)
    s = float(u @ u)
    return chi2.ppf(FALSE_FAILURE / 2, u.size) <= s <= chi2.ppf(1 - FALSE_FAILURE / 2, u.size), s / u.size


def test_the_vertical_label_step_noises_the_residuals_and_the_intercept_sum():
    n, names = 10, ("party1", "party2")
    labels = np.where(np.arange(n) % 3 == 0, 1.0, -1.0)
    cfg = vm.CoordinatorConfig(labels=labels, loss=get_loss("logistic"), lam=0.01, rho=1.0, party_names=names,
                               fit_intercept=True, label_privacy=vm.LabelPrivacy(noise_multiplier=2.0, clip=1.0))
    st = vc.init_coordinator(cfg)[0]
    zero = vm.PartyMessage(share=np.zeros(n))
    g = np.clip(cfg.loss.grad(np.zeros(n) + st.intercept, labels), -1.0, 1.0)
    dual, intercept = [], []
    for s in range(RELEASES):
        new, out, (event,) = vl.label_private_step(cfg, st, {k: zero for k in names}, rng=np.random.default_rng([17, s]))
        dual.append((np.asarray(out["party2"].dual) - g) / event.sigma)
        intercept.append(((st.intercept - new.intercept) * st.rho * n - g.sum()) / event.sigma)
    for part, u in (("residuals", dual), ("intercept sum", intercept)):
        ok, ratio = _chi2_ok(u)
        assert ok, (part, ratio)


@pytest.mark.parametrize("part", ["gamma", "own"])
def test_the_encrypted_gaussian_label_mechanism_noises_every_gradient(part):
    n, d0, d2 = 8, 2, 3
    rng = np.random.default_rng(8)
    with plaintext_he():
        cfg, st = enc_label.setup_label(rng.normal(size=(n, d0)), np.where(rng.random(n) < 0.5, 1.0, -1.0), R=1.0,
                                        widths={"party2": d2}, clips={"party2": 1.0}, noise_multiplier=2.0, rounds=1,
                                        lam=0.0, step=1.0)
        key = he.keygen()
        st = st._replace(g=np.zeros(n, dtype=np.int64))  # every residual 0: what comes back is the noise
        reply = {"party2": EncryptedGradient(he.wire(key.encrypt(np.zeros(d2))))}
        u = []
        for s in range(RELEASES):
            new, out, (event,) = enc_label.open_gradients(cfg, st, key, reply, rng=np.random.default_rng([19, s]))
            # own: w₁ = w₀ − step·(own/n + λw₀) from w₀ = 0, velocity 0, no projection (forward="clear")
            noise = out["party2"] if part == "gamma" else -new.w * n / cfg.step
            u.append(noise / event.sigma)
    ok, ratio = _chi2_ok(u)
    assert ok, (part, ratio)
