"""The functional ``moments`` stage (stage 3 of ``algorithms.functional.statistics``) attacked by the hub through the
shape of the centre it sends. ``_check_request`` checks the centre is finite, not that it is a (J,) vector: a centre
of shape (B, 1, 1, J) broadcasts ``Z − center`` to (B, 1, m, J), ``moment_sum`` then returns B moment matrices (its weights ``ones(U.shape[1])`` broadcast: the second axis is 1), and
``noisy_moment_sum`` noises each with its own draw — B Gaussian releases of the same statistic, one event booked.

Found (xfail strict, F4, high): with B = 400 copies at the zero centre the hub averages the noise down by √B = 20.
Worst-case neighbours (one curve 0 vs a unit curve along the first coordinate, c₂ = 1: the (1, 1) entry moves by 1,
σ = z·(3/√2)c₂² = 4.24 at z = 2): the average of the 400 copies is 0.016 on D and 0.978 on D′ (sd 0.21), and a
threshold at ½ gives Clopper–Pearson ε ≥ 3.56 from 200 runs a side. The booked event: z = 2, ε(δ = 1e-5) = 1.99; the
release: 400 Gaussians at z = 2, ε(δ = 1e-5) = 91.8 — and B is the hub's (→ ∞).

Held (regular test): the honest (J,) centre releases one matrix and one event at σ = z·Δ.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import beta

from dpadmm.algorithms.functional import statistics as fs
from dpadmm.privacy.policy import PolicyRefusal

T, M, Z, C2, B = 4, 20, 2.0, 1.0, 400


def _neighbours():
    X = np.zeros((M, T))
    X2 = X.copy()
    X2[0, 0] = 1.0  # one curve replaced: u = e_1, ‖u‖ = c₂
    return X, X2


def _release(X, center, seed):
    cfg, _ = fs.setup_stats("w", X, np.zeros(M), np.ones(T), Z)
    req = fs.StatsRequest("moments", curve_clip=C2, center=center)
    _, msg, ev = fs.stats_step(cfg, None, req, rng=np.random.default_rng([11, seed]))
    return np.asarray(msg.values["S"]), ev


def _cp(a0, n0, a1, n1, alpha=0.05):
    lo = beta.ppf(alpha / 2, a0, n0 - a0 + 1) if a0 > 0 else 0.0
    hi = beta.ppf(1 - alpha / 2, a1 + 1, n1 - a1) if a1 < n1 else 1.0
    return math.log(lo / hi) if lo > 0 else 0.0


def test_the_honest_centre_releases_one_matrix_at_the_booked_noise():
    S, ev = _release(_neighbours()[0], np.zeros(T), 0)
    assert S.shape == (T + 1, T + 1)
    assert len(ev) == 1 and ev[0].sigma == pytest.approx(Z * fs.moment_release_sensitivity(C2))


def test_a_broadcasting_centre_is_refused_or_releases_one_matrix():
    X, X2 = _neighbours()
    center = np.zeros((B, 1, 1, T))
    try:
        S0, ev = _release(X, center, 0)
    except (PolicyRefusal, ValueError):
        return  # refused on the request alone: held
    assert len(ev) == 1
    runs = 200
    stat0 = np.array([_release(X, center, s)[0][..., 1, 1].mean() for s in range(runs)])
    stat1 = np.array([_release(X2, center, runs + s)[0][..., 1, 1].mean() for s in range(runs)])
    eps = _cp(int(np.sum(stat1 > 0.5)), runs, int(np.sum(stat0 > 0.5)), runs)
    assert S0.shape == (T + 1, T + 1) and eps < 1.0, (S0.shape, eps, stat0.mean(), stat1.mean())
