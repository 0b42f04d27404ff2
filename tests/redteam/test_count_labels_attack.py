"""Label DP for counts (:mod:`dpadmm.privacy.label_counts`, randomized response on bins over clipped counts) attacked
as the label party's adversary: every other party, knowing every feature and every other label. Run against the
``counts`` branch's src.

Held (measured here):

1. Worst-case neighbours for the whole release (DP bound U, Laplace prior, RR): one label 0 in D, far above any
   clip bound (10⁹, and 10¹⁵ beyond the DP grid) in D′. The best of three statistics (the row's released label, U,
   the row's output rank) chosen on a pilot half, Clopper–Pearson on the other (α = 0.05, 1,500 runs a side), stays
   within the claim ε = 1, and sees the change (the test has power).
2. The DP bound alone (AboveThreshold at ε_r): neighbours that move one count across the 95% quantile (n = 20, every
   label 0 vs one label 10⁹) are told apart at most within ε_r (3,000 runs a side) — and, with power, above 40% of it.
3. The ε the release books recomputes from the noise drawn: the AboveThreshold scales (2/ε_r threshold, 4/ε_r
   queries), the prior's Laplace scale (2/ε_p) and the RR keep probability (e^{ε_rr}/(e^{ε_rr} + k − 1)) give back
   each event's ε; a planted Lap(2/ε_r) query noise (half the scale) is caught.
4. Nothing after the release uses a raw count: the joint fit, U and the bins are the same whatever the top label is
   once the release's draws are fixed (a row's exact count reaches only the label party's local refit).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

lc = pytest.importorskip("dpadmm.privacy.label_counts", reason="the count release (counts branch, 0c9531c) is not in "
                         "this src")

from dpadmm.privacy.audit import best_epsilon_lower_bound, epsilon_lower_bound  # noqa: E402


def _stats(labels, runs, seed, **kw):
    rng = np.random.default_rng(seed)
    out = {"row": np.empty(runs), "upper": np.empty(runs), "rank": np.empty(runs)}
    for i in range(runs):
        r = lc.rr_on_counts(labels, 1.0, rng=rng, n_bins=8, **kw)
        out["row"][i] = r.labels[0]
        out["upper"][i] = r.label_range[1]
        out["rank"][i] = np.searchsorted(np.sort(r.outputs), r.labels[0]) / max(1, r.outputs.size - 1)
    return out


@pytest.mark.parametrize("far", [1e9, 1e15])
def test_worst_case_neighbours_of_the_whole_release_stay_within_the_claim(far):
    base = np.random.default_rng(7).poisson(3.0, size=40).astype(float)
    D, Dp = base.copy(), base.copy()
    D[0], Dp[0] = 0.0, far
    s0, s1 = _stats(D, 1500, 1), _stats(Dp, 1500, 2)
    lb = best_epsilon_lower_bound(s0, s1, 0.0)
    assert lb["epsilon_lower_bound"] <= 1.0, lb
    assert np.mean(s0["rank"]) + 0.2 < np.mean(s1["rank"])  # the release sees the row (its output rank moves up)


def test_worst_case_neighbours_with_a_declared_bound_stay_within_the_claim():
    base = np.random.default_rng(8).poisson(3.0, size=40).astype(float)
    D, Dp = base.copy(), base.copy()
    D[0], Dp[0] = 0.0, 1e12  # far above the declared U = 10: clipped to it
    s0, s1 = _stats(D, 1500, 3, upper=10), _stats(Dp, 1500, 4, upper=10)
    lb = epsilon_lower_bound(s0["row"], s1["row"], 0.0)
    assert lb["epsilon_lower_bound"] <= 1.0, lb
    assert lb["epsilon_lower_bound"] >= 0.2, lb  # power: RR at ε_rr = 0.9 moves the row's label


def _uppers(labels, eps, runs, seed):
    rng = np.random.default_rng(seed)
    return np.array([lc.dp_count_upper(labels, eps, rng) for _ in range(runs)], dtype=float)


def test_the_dp_bound_alone_stays_within_its_epsilon():
    D = np.zeros(20)
    Dp = D.copy()
    Dp[0] = 1e9  # the count at or below every grid point drops by one: 20 → 19 = q·n
    u0, u1 = _uppers(D, 1.0, 3000, 5), _uppers(Dp, 1.0, 3000, 6)
    lb = epsilon_lower_bound(u0, u1, 0.0)["epsilon_lower_bound"]
    assert lb <= 1.0, lb
    assert lb >= 0.05, lb  # the bound's distribution moves (power; 0.12 measured)


class _Recording:
    """A generator that records the scales of its gamma draws (the Laplace of the bound and the prior) and its
    uniforms' count; ``factor`` scales the query noise (the plant)."""

    def __init__(self, seed, factor=1.0):
        self.g, self.scales, self.factor = np.random.default_rng(seed), [], factor

    def gamma(self, shape, scale, size=None):
        self.scales.append((float(scale), size))
        return self.g.gamma(shape, scale, size)

    def laplace(self, loc=0.0, scale=1.0, size=None):
        self.scales.append((float(scale), size))
        return self.g.laplace(loc, scale, size)

    def __getattr__(self, name):
        return getattr(self.g, name)


def _recomputed(release, rng):
    """Each event's ε from what was drawn: AboveThreshold ε_r = 2/b_threshold = 4/b_query (both must agree),
    the prior's ε_p = 2/b (ℓ1 sensitivity 2), RR's ε_rr from the keep probability's odds."""
    grid = lc.COUNT_GRID.size
    thr = [s for s, size in rng.scales if size is None]
    query = [s for s, size in rng.scales if size == grid]
    rest = [s for s, size in rng.scales if size not in (None, grid)]
    eps_r = {2.0 / s for s in thr} | {4.0 / s for s in query}
    eps_p = {2.0 / s for s in rest}
    return eps_r, eps_p


def test_the_booked_epsilon_recomputes_from_the_draws():
    rng = _Recording(0)
    y = np.random.default_rng(1).poisson(4.0, size=300).astype(float)
    r = lc.rr_on_counts(y, 1.0, rng=rng)
    by_round = {e.round: e.epsilon for e in r.events}
    eps_r, eps_p = _recomputed(r, rng)
    assert len(eps_r) == 1 and next(iter(eps_r)) == pytest.approx(by_round[-2], rel=1e-12)
    assert len(eps_p) == 1 and next(iter(eps_p)) == pytest.approx(by_round[-1], rel=1e-12)
    assert sum(by_round.values()) == pytest.approx(1.0, rel=1e-12)


def test_the_recompute_catches_query_noise_at_half_its_scale(monkeypatch):
    """Plant: AboveThreshold's query noise at 2/ε_r (half): the two recomputed ε_r disagree."""
    real = lc._laplace
    monkeypatch.setattr(lc, "_laplace", lambda scale, size, rng: real(scale / 2 if size is not None else scale,
                                                                      size, rng))
    rng = _Recording(0)
    y = np.random.default_rng(1).poisson(4.0, size=300).astype(float)
    lc.rr_on_counts(y, 1.0, rng=rng)
    eps_r, _ = _recomputed(None, rng)
    assert len(eps_r) == 2


def test_nothing_after_the_release_reads_the_raw_top_count():
    """Same generator stream, the top label 50 vs 10⁹ (both far above the declared U = 10): every released quantity
    is identical — the clip happens before any use, and nothing downstream sees the row's exact count."""
    base = np.random.default_rng(9).poisson(3.0, size=60).astype(float)
    D, Dp = base.copy(), base.copy()
    D[0], Dp[0] = 50.0, 1e9
    r0 = lc.rr_on_counts(D, 1.0, rng=np.random.default_rng(3), upper=10)
    r1 = lc.rr_on_counts(Dp, 1.0, rng=np.random.default_rng(3), upper=10)
    for a, b in [(r0.labels, r1.labels), (r0.noisy_counts, r1.noisy_counts), (r0.outputs, r1.outputs),
                 (r0.edges, r1.edges)]:
        np.testing.assert_array_equal(a, b)
    assert r0.label_range == r1.label_range == (0.0, 10.0)
    assert math.isfinite(float(np.max(r0.labels))) and np.max(r0.labels) <= 10.5


def test_the_declared_bound_audit_catches_rr_at_three_times_its_epsilon(monkeypatch):
    """Plant: the RR step at 3·ε_rr (events unchanged): the same audit as above exceeds the claim (1.14 measured)."""
    from dpadmm.privacy import label_mechanisms as lm

    real = lm.randomize_indices
    monkeypatch.setattr(lm, "randomize_indices", lambda a, k, e, rng: real(a, k, 3 * e, rng))
    base = np.random.default_rng(8).poisson(3.0, size=40).astype(float)
    D, Dp = base.copy(), base.copy()
    D[0], Dp[0] = 0.0, 1e12
    s0, s1 = _stats(D, 1500, 3, upper=10), _stats(Dp, 1500, 4, upper=10)
    assert epsilon_lower_bound(s0["row"], s1["row"], 0.0)["epsilon_lower_bound"] > 1.0


def test_poisson_sharing_makes_no_finite_claim_it_cannot_back():
    """VerticalPoissonRegression (2066255): every private route either refuses (the linearised protocol: gaussian
    features, gaussian labels — unbounded curvature e^s) or reports ε = ∞ (``mechanism="paper"``, not DP as published);
    no route prints a finite ε over an unbounded-gradient loss."""
    import warnings

    from dpadmm import VerticalPoissonRegression
    from dpadmm.exceptions import PrivacyPreconditionError

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 4))
    X[:, :2] /= np.linalg.norm(X[:, :2], axis=1, keepdims=True)
    X[:, 2:] /= np.linalg.norm(X[:, 2:], axis=1, keepdims=True)
    y = rng.poisson(np.exp(0.3 * X[:, 0])).astype(float)
    y[0] = 1e6  # a huge count: its gradient e^s − y is unbounded
    for kw in (dict(epsilon=1.0), dict(label_epsilon=1.0), dict(label_epsilon=1.0, epsilon=1.0)):
        with pytest.raises(PrivacyPreconditionError, match="unbounded curvature"):
            VerticalPoissonRegression(party_sizes=[2, 2], random_state=0, max_iter=10, **kw).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = VerticalPoissonRegression(party_sizes=[2, 2], random_state=0, max_iter=10, epsilon=1.0,
                                      mechanism="paper").fit(X, y)
    assert m.privacy_.epsilon == math.inf
