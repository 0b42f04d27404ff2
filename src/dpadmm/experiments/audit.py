"""The audit suite behind ``dpadmm audit``: every private mechanism as the algorithms release it,
on worst-case neighbouring inputs at the mechanism's stated sensitivity, plus one deliberately
broken mechanism (noise scale divided by 10) that the audit must catch.

Each mechanism is calibrated to claim ε = 1 per release at δ = 1e-5 (by the accountant the
library reports with), so that a 10× too small noise scale — whose true ε is above 10 — is
within reach of an empirical lower bound from ~10⁵–10⁶ samples.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..privacy.accountants import calibrate_noise_multiplier, gaussian_epsilon
from ..privacy.audit import AuditResult, audit_pair

AUDIT_DELTA = 1e-5
AUDIT_CLAIM = 1.0


def _hu_vertical(samples: int, seed: int, confidence: float, broken: bool) -> AuditResult:
    """[Hu, eq. 16] through ``vertical_sharing.release`` on a small party block."""
    from ..algorithms import vertical_sharing as vs
    from ..data.parties import normalize_rows
    from ..kernels.regularizers import L2

    gen = np.random.default_rng(2024)
    D = normalize_rows(gen.integers(0, 2, size=(40, 5)).astype(float) + 0.1)
    nm = calibrate_noise_multiplier(AUDIT_CLAIM, AUDIT_DELTA, 1, "pld")
    claim = gaussian_epsilon([nm], AUDIT_DELTA, "pld")
    spec = vs.PrivacySpec(noise_multiplier=nm / 10.0 if broken else nm, bounds=vs.Bounds(5.0, 10.0, 10.0),
                          n_parties=2)
    cfg, _ = vs.make_party("party1", D, lam_sum=0.4, reg=L2(), private=spec, bound=5.0)
    rho = 0.3
    C = vs.sensitivity(cfg, rho)
    u = cfg.basis[:, 0]
    share0 = D @ gen.normal(size=5)
    shares = (share0, share0 + C * u)  # neighbours whose shares differ by exactly the stated sensitivity

    def sample(rng, which, n):
        return vs.release(cfg, shares[which], rho, 0, rng=rng, size=n)[0]

    return audit_pair("hu-vertical-share" + (" (broken: sigma/10)" if broken else ""), sample, u,
                      epsilon_claimed=claim, delta=AUDIT_DELTA, samples=samples, confidence=confidence, seed=seed,
                      broken=broken, description="party share D_m x_m + sigma U_m g of one iteration [Hu, eq. 16], "
                      "feature-column neighbours at the stated sensitivity C of [Hu, Lemma 1]")


MECHANISMS: dict[str, Callable[..., AuditResult]] = {"hu-vertical-share": _hu_vertical}


def run_audit(*, samples: int = 400_000, seed: int = 0, confidence: float = 0.95, progress=None) -> list[AuditResult]:
    """Audit every registered mechanism, then the planted broken one."""
    results = []
    for name, fn in MECHANISMS.items():
        results.append(fn(samples, seed, confidence, False))
        if progress:
            progress(name)
    results.append(_hu_vertical(samples, seed, confidence, True))
    if progress:
        progress("broken")
    return results
