"""The PLD accountant's ε computed by its own steps with the Gaussian loss evaluated in one pass
(:func:`dpadmm.privacy.accountants.gaussian._pld_epsilon`) is dp-accounting's accountant's ε, bit for bit."""

import numpy as np
from dp_accounting.pld import privacy_loss_mechanism as plm

from dpadmm.privacy.accountants import gaussian as g


def test_the_pld_epsilon_is_the_accountants_bit_for_bit():
    rng = np.random.default_rng(4)
    cases = [(56.577886606733806,) * 230, (44.767713920626335,) * 144, (0.9,), (3.0, 3.0),
             tuple(sorted([60.1] * 216 + [60.100000000000001] * 14))]  # one rounding apart: two groups
    for _ in range(8):
        groups = rng.uniform(0.6, 90.0, rng.integers(1, 4)).tolist()
        cases.append(tuple(sorted(m for m in groups for _ in range(int(rng.integers(1, 250))))))
    assert g._FAST_PLD
    for nms in cases:
        for delta in (1e-5, 1e-7):
            fast = g._pld_epsilon(nms, delta)
            assert fast == g._accountant_epsilon(nms, delta, "pld"), (len(nms), delta)
            assert np.isfinite(fast) and fast > 0


def test_the_gaussian_loss_in_one_pass_is_the_librarys():
    rng = np.random.default_rng(5)
    for std in (0.3, 1.0, 7.5, 120.0):
        ours = g._GaussianLoss(std, sensitivity=1, sampling_prob=1.0, adjacency_type=plm.AdjacencyType.REMOVE)
        theirs = plm.GaussianPrivacyLoss(std, sensitivity=1, sampling_prob=1.0, adjacency_type=plm.AdjacencyType.REMOVE)
        eps = np.sort(rng.uniform(-5, 30, 500)) * 1e-3 * rng.integers(1, 100)
        assert ours.get_delta_for_epsilon(eps).tobytes() == theirs.get_delta_for_epsilon(eps).tobytes()
        assert ours.get_delta_for_epsilon(0.5) == theirs.get_delta_for_epsilon(0.5)  # a scalar: the library's own


def test_gaussian_epsilon_still_says_the_accountants_answer():
    g._composed_epsilon.cache_clear()
    assert g.gaussian_epsilon([4.0] * 50, 1e-5) == g._accountant_epsilon((4.0,) * 50, 1e-5, "pld")
    assert g.gaussian_epsilon([4.0] * 50, 1e-5, "rdp") == g._accountant_epsilon((4.0,) * 50, 1e-5, "rdp")
