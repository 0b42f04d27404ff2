"""Randomized response on bins and k-ary randomized response (:mod:`dpadmm.privacy.label_mechanisms`) attacked as
the label party's adversary: every other party, knowing every other label.

Held (measured here): (1) the ε a release books is its total — range + prior + RR events sum to the ε asked, and the
estimator's ``privacy_`` reports that sum; (2) worst-case neighbours (one label moved from the lowest bin to the
highest, and to a NaN-free value far outside a declared range or the DP range's search grid) are not distinguished
beyond the claim by a likelihood-ratio test on the released row (Clopper–Pearson, α = 0.05); (3) non-finite labels
and labels outside the K classes are refused before any draw, data-independently of the other rows.
Noted, not a leak: ``LabelPrivateVerticalRegression``'s ``coefs_``/``intercept_``/``label_party_cv_`` are the label
party's refit on its EXACT labels (the module says the model stays with the label party); ``privacy_`` now says so.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpadmm.privacy.audit import epsilon_lower_bound
from dpadmm.privacy.label_mechanisms import k_randomized_response, rr_on_bins


def _bins_scores(labels, runs: int, seed: int, **kw):
    rng = np.random.default_rng(seed)
    out = np.empty(runs)
    for i in range(runs):
        r = rr_on_bins(labels, 1.0, rng=rng, n_bins=8, **kw)
        out[i] = r.labels[0]
    return out


@pytest.mark.parametrize("far", [False, True])
def test_rr_on_bins_worst_case_neighbours_stay_within_the_claim(far):
    base = np.linspace(0.0, 1.0, 40)
    D = base.copy()
    D[0] = 0.0
    Dp = base.copy()
    Dp[0] = 1e300 if far else 1.0  # the top bin; far: a label far outside the declared range (clipped)
    s0 = _bins_scores(D, 1200, 1, label_range=(0.0, 1.0))
    s1 = _bins_scores(Dp, 1200, 2, label_range=(0.0, 1.0))
    lb = epsilon_lower_bound(s0, s1, 0.0)
    assert lb["epsilon_lower_bound"] <= 1.0, lb  # claim: ε = 1 (prior 0.1 + RR 0.9)
    assert np.mean(s0) < np.mean(s1)  # the test can see the change (the release is not constant)


def test_the_dp_range_with_a_label_beyond_the_search_grid_stays_within_the_claim():
    base = np.random.default_rng(3).normal(size=60)
    Dp = base.copy()
    Dp[0] = 1e308  # beyond ±SEARCH_LIMIT: counted at the grid's end
    s0 = _bins_scores(base, 800, 4)
    s1 = _bins_scores(Dp, 800, 5)
    assert epsilon_lower_bound(s0, s1, 0.0)["epsilon_lower_bound"] <= 1.0


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_labels_are_refused(bad):
    with pytest.raises(ValueError, match="finite"):
        rr_on_bins(np.array([0.0, bad, 1.0]), 1.0, rng=np.random.default_rng(0))
    with pytest.raises(ValueError):
        k_randomized_response(np.array([0.0, bad, 1.0]), 3, 1.0, rng=np.random.default_rng(0))


def test_the_events_sum_to_the_epsilon_asked():
    rng = np.random.default_rng(0)
    for kw in ({}, {"label_range": (0.0, 1.0)}):
        r = rr_on_bins(rng.uniform(size=50), 0.7, rng=rng, n_bins=8, **kw)
        assert sum(e.epsilon for e in r.events) == pytest.approx(0.7, rel=1e-12)


def test_the_estimator_says_which_attributes_are_the_label_partys_own():
    from dpadmm.estimators.label_regression import LabelPrivateVerticalRegression

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 4))
    y = X @ np.array([1.0, -1.0, 0.5, 0.2]) + 0.1 * rng.normal(size=300)
    m = LabelPrivateVerticalRegression(label_epsilon=1.0, party_sizes=[2, 2], random_state=0, max_iter=20).fit(X, y)
    assert m.privacy_["label"]["epsilon"] == pytest.approx(1.0)
    local = m.privacy_.get("local", "")
    assert "coefs_" in local and "label_party_cv_" in local and "exact labels" in local
