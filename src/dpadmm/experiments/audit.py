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
from ..algorithms.vertical import messages as vertical_messages, party as vertical_party
from ..data.parties import normalize_rows
from ..kernels.regularizers import L2
from ..algorithms.consensus import (messages as consensus_messages, node as consensus_node,
                                    schedules as consensus_schedules)
from ..algorithms.functional import messages as functional_messages, party as functional_party

AUDIT_DELTA = 1e-5
AUDIT_CLAIM = 1.0


def _hu_vertical(samples: int, seed: int, confidence: float, broken: bool) -> AuditResult:
    """[Hu, eq. 16] through ``vertical_sharing.release`` on a small party block."""

    gen = np.random.default_rng(2024)
    D = normalize_rows(gen.integers(0, 2, size=(40, 5)).astype(float) + 0.1)
    nm = calibrate_noise_multiplier(AUDIT_CLAIM, AUDIT_DELTA, 1, "pld")
    claim = gaussian_epsilon([nm], AUDIT_DELTA, "pld")
    spec = vertical_messages.PrivacySpec(noise_multiplier=nm / 10.0 if broken else nm, bounds=vertical_messages.Bounds(5.0, 10.0, 10.0),
                          n_parties=2)
    cfg, _ = vertical_party.make_party("party1", D, lam_sum=0.4, reg=L2(), private=spec, bound=5.0)
    rho = 0.3
    C = vertical_party.sensitivity(cfg, rho)
    u = cfg.basis[:, 0]
    share0 = D @ gen.normal(size=5)
    shares = (share0, share0 + C * u)  # neighbours whose shares differ by exactly the stated sensitivity

    def sample(rng, which, n):
        return vertical_party.release(cfg, shares[which], rho, 0, rng=rng, size=n)[0]

    return audit_pair("hu-vertical-share" + (" (broken: sigma/10)" if broken else ""), sample, u,
                      epsilon_claimed=claim, delta=AUDIT_DELTA, samples=samples, confidence=confidence, seed=seed,
                      broken=broken, description="party share D_m x_m + sigma U_m g of one iteration [Hu, eq. 16], "
                      "feature-column neighbours at the stated sensitivity C of [Hu, Lemma 1]")


def _zhang_pp(samples: int, seed: int, confidence: float, broken: bool = False) -> AuditResult:
    """Penalty perturbation [Zhang, eq. 24–25] through ``graph_consensus.block_step``: the f_i(1) a
    node broadcasts after its first perturbed update, on datasets differing in one record (label
    flipped). Claimed: the per-iteration term of [Zhang, Thm 4.1] (pure DP). The block holds
    ``chunk`` copies of the node, so one step draws ``chunk`` independent releases."""
    samples = min(samples, 200_000)  # each release costs a Newton solve: cap the sample count
    gen = np.random.default_rng(7)
    B, d = 10, 2
    X = gen.normal(size=(B, d))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))  # ‖x‖ ≤ 1 [Zhang, Thm 4.1]
    y = np.where(gen.random(B) < 0.5, -1.0, 1.0)
    y2 = y.copy()
    y2[0] = -y2[0]  # the neighbour: one record replaced
    C, reg, eta, alpha = 1.0, 0.1, 0.5, 4.65
    claim = float(consensus_schedules.zhang_epsilon_terms(C=C, B=B, degree=1.0, eta=eta, alpha=alpha))

    def block(labels, k, perturbation, a=alpha):
        return consensus_node.make_block([f"n{i}" for i in range(k)], [X] * k, [labels] * k, degree=np.ones(k), C=C, reg=reg,
                             eta=np.full((k, 1), eta), theta=np.full((k, 1), eta), alpha=np.full((k, 1), a),
                             perturbation=perturbation)

    inbox = lambda k: consensus_messages.NeighbourMessage(0, np.zeros((k, d)))  # noqa: E731
    f0 = [consensus_node.block_step(*block(lab, 1, "none"), inbox(1), rng=np.random.default_rng(0))[1].f[0] for lab in (y, y2)]
    direction = (f0[1] - f0[0]) / np.linalg.norm(f0[1] - f0[0])

    def sample(rng, which, n):
        cfg, st = block((y, y2)[which], n, "pp", alpha * 10.0 if broken else alpha)
        return consensus_node.block_step(cfg, st, inbox(n), rng=rng)[1].f

    return audit_pair("zhang-pp-update" + (" (broken: noise/10)" if broken else ""), sample, direction,
                      epsilon_claimed=claim, delta=0.0, samples=samples, confidence=confidence, seed=seed,
                      broken=broken, chunk=20_000,
                      description="node's broadcast f_i(1) under penalty perturbation [Zhang, eq. 24-25]; "
                      "record-replace neighbours (one label flipped); claim = [Zhang, Thm 4.1] term (pure DP)")


def _zhou_fdp(samples: int, seed: int, confidence: float, broken: bool = False) -> AuditResult:
    """FDP-ADMM's released w̃_i [Zhou, eq. 21–22, Thm 1] through ``functional_quantile.party_step``
    on one worker's data and on the same data with one sample replaced. The worker runs ``n``
    identical privacy settings side by side, so one step draws ``n`` independent releases."""
    gen = np.random.default_rng(11)
    m, K, tau, c1 = 20, 3, 0.9, 1.0
    A = gen.normal(size=(m, K))
    A /= np.maximum(1.0, np.linalg.norm(A, axis=1, keepdims=True) / c1)  # clipped scores ‖A_j‖ ≤ c_1
    y = gen.normal(size=m)
    A2, y2 = A.copy(), y.copy()
    A[0], y[0] = c1 * np.eye(K)[0], 50.0  # a sample far above the fit (indicator 0)
    A2[0], y2[0] = -c1 * np.eye(K)[0], 50.0  # replaced: the opposite direction — the largest change
    nm = calibrate_noise_multiplier(AUDIT_CLAIM, AUDIT_DELTA, 1, "pld")
    claim = gaussian_epsilon([nm], AUDIT_DELTA, "pld")

    def release(data, n, z):
        settings = functional_messages.Settings.make(np.full(n, tau), noise_multiplier=z, lam=0.05, eps_iter=1.0,
                                    delta_iter=AUDIT_DELTA)
        cfg, st = functional_party.make_party("worker1", data[0], data[1], settings, rho=0.1, n_workers=1, c1=c1)
        return cfg, st, functional_messages.HubMessage(0, np.zeros((1, n, K)))

    def run(data, n, z, rng):
        cfg, st, inbox = release(data, n, z)
        return functional_party.party_step(cfg, st, inbox, rng=rng)[1].w_tilde[0, 0]

    clean = [run(dset, 1, 0.0, np.random.default_rng(0))[0] for dset in ((A, y), (A2, y2))]
    direction = (clean[1] - clean[0]) / np.linalg.norm(clean[1] - clean[0])
    z_used = nm / 10.0 if broken else nm

    def sample(rng, which, n):
        return run(((A, y), (A2, y2))[which], n, z_used, rng)

    return audit_pair("zhou-fdp-local-update" + (" (broken: sigma/10)" if broken else ""), sample, direction,
                      epsilon_claimed=claim, delta=AUDIT_DELTA, samples=samples, confidence=confidence, seed=seed,
                      broken=broken, chunk=20_000,
                      description="worker's noisy linearised update w~_i [Zhou, eq. 21-22] with sigma of [Zhou, Thm 1] "
                      "(corrected sensitivity 2c1/(m(rho + 1/eta))); record-replace neighbours")


MECHANISMS: dict[str, Callable[..., AuditResult]] = {
    "hu-vertical-share": _hu_vertical, "zhang-pp-update": _zhang_pp, "zhou-fdp-local-update": _zhou_fdp,
}


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
