"""With two or more non-label parties (``forward="encrypted"``, ``peers``) a party's three Gaussian releases per round —
ξ in its gradient's column sums (``4(D̂ᵀĝ₀ + ξ)``), ζ on the label party's masked cross sums, and ζ on each peer's
column sums of its own scores at Open — add the noise their events state. The audit games cover the one-party protocol
only: halving the Open's ζ (events unchanged) passed every default plant, audit and encrypted test. Here one party's
own steps run on the plaintext HE layer with all-zero inputs, so every value it returns is its noise (the label party's
view after removing the masks, as :func:`label.combine_peers` does), and each release's noise over its stated σ must be
N(0, 1): two-sided χ² (false failure ≤ 10⁻⁶ per release kind, the test seeded)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import chi2

from dpadmm.algorithms.encrypted import he
from dpadmm.algorithms.encrypted import party as ep
from dpadmm.algorithms.encrypted.messages import BLOCK_BITS, RESIDUAL_BITS
from dpadmm.experiments.audit_games_encrypted import PlainHe, plaintext_he

ROUNDS, FALSE_FAILURE, N, D, D3 = 300, 1e-6, 12, 3, 2
SCALE = float(2 ** (RESIDUAL_BITS + BLOCK_BITS))


def _noises() -> dict[str, list]:
    rng = np.random.default_rng(5)
    out = {"xi": [], "cross": [], "open": []}
    with plaintext_he():
        cfg, st = ep.setup_party("party2", rng.normal(size=(N, D)), R=1.0, noise_multiplier=2.0, rounds=ROUNDS,
                                 lam=1e-4, step=2.0, forward="encrypted", W=1.0, label_R=1.0, label_W=1.0,
                                 label_width=3, peers={"party3": (1.0, 1.0, D3)})
        label_key, peer = PlainHe(True), PlainHe(True)
        gen = np.random.default_rng(6)
        st, hello, _ = ep.step(cfg, st, ep.Start(he.wire(label_key.public_key())), rng=gen)
        own = he.from_public_key(hello.public_key, he.SCHEME_MASKED)
        for t in range(ROUNDS):
            st, _, _ = ep.step(cfg, st, ep.Forward(None if t == 0 else np.zeros(D),
                                                   keys={"party3": he.wire(peer.public_key())} if t == 0 else None),
                               rng=gen)
            st, eg, ev = ep.step(cfg, st, ep.Backward(he.wire(label_key.encrypt(np.zeros(N))),
                                                      he.wire(own.encrypt(np.zeros(3))),
                                                      {"party3": he.wire(peer.encrypt(np.zeros(N)))}), rng=gen)
            sigma = {e.sensitivity: e.sigma for e in ev}
            lam = he.from_residues(eg.peer_offsets["party3"], D, peer.modulus, "λ")
            rho = [he.centred(v - m, peer.modulus) for v, m in zip(peer.decrypt(peer.load(eg.peer_cross["party3"])), lam)]
            xi = [(v + r) for v, r in zip(label_key.decrypt(label_key.load(eg.ciphertexts)), rho)]  # 4ξ at 2^40
            out["xi"] += [x / (4.0 * SCALE * sigma[cfg.sensitivity]) for x in xi]
            out["cross"] += [he.centred(v, own.modulus) / (SCALE * sigma[cfg.cross_sensitivity])
                             for v in he.from_residues(eg.cross, 3, own.modulus, "cross")]
            st, opened, (event,) = ep.step(cfg, st, ep.Open({"party3": he.wire(own.encrypt(np.zeros(D3)))}), rng=gen)
            out["open"] += [he.centred(v, own.modulus) / (SCALE * event.sigma)
                            for v in he.from_residues(opened.values["party3"], D3, own.modulus, "opened")]
    return out


@pytest.fixture(scope="module")
def noises():
    return _noises()


@pytest.mark.parametrize("kind", ["xi", "cross", "open"])
def test_each_peer_round_release_has_its_stated_noise(noises, kind):
    u = np.asarray(noises[kind], dtype=float)
    lo, hi = chi2.ppf(FALSE_FAILURE / 2, u.size), chi2.ppf(1 - FALSE_FAILURE / 2, u.size)
    assert lo <= float(u @ u) <= hi, (kind, float(u @ u) / u.size)
