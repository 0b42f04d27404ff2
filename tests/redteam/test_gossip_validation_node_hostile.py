"""Red team of the deployed gossip validation stage (docs/redteam-2026-11-29.md, third pass: V-plants). The node's
own ``answer`` is attacked directly, as a hostile coordinator reaches it at a deployed node (no simulation wrapper in
front: :func:`validation.compare_release` puts the model in the public box and clips p before asking, so tests that
go through it cannot see whether the node does so itself)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpadmm.algorithms.gossip import validation as val

EPS = (0.05, 0.15)


class _Scale:
    """A generator whose Laplace draw is its scale: the release minus the un-noised sum is the scale the node used."""

    def laplace(self, loc, scale):
        return loc + scale


def _rows(n=40, seed=0):
    """Prepared rows (intercept last) with entries of both signs and of size up to 2."""
    r = np.random.default_rng(seed)
    X = np.column_stack([r.uniform(-2.0, 2.0, size=(n, 3)), np.ones(n)])
    return X, np.where(r.random(n) < 0.5, 1.0, -1.0)


def _compare(X, y, w, p, L, pm, rng=None):
    req = val.ValidationRequest("compare", EPS[1], np.asarray(w, dtype=np.float64), p, L, pm)
    _, out, events = val.answer("node0", X, y, EPS, ("count",), req, rng or _Scale())
    return out.value, events


@pytest.mark.parametrize("w", [[1.7e308, -1.7e308, 1.7e308, -1.7e308], [1e308, 1e308, -1e308, 1e308]])
def test_a_finite_but_huge_model_gives_a_number_within_the_priced_shift(w):
    """A finite model whose margins overflow (1.7e308 × 2 of mixed signs: inf − inf = NaN in the product) is put in
    the node's public box before use: every release is a number, and replacing any one record moves the un-noised
    sum by at most the Δ the noise was scaled by. (Without the node's own ``bounded``, NaN on every data set: a
    planted removal was not caught by the earlier tests, which go through ``compare_release``.)"""
    X, y = _rows()
    noisy, _ = _compare(X, y, w, 0.3, 4.0, 0.01, rng=np.random.default_rng(0))
    assert math.isfinite(noisy)
    base, _ = _compare(X, y, w, 0.3, 4.0, 0.01)
    delta = val.validation_sensitivity(0.3, 4.0, 0.01)
    assert math.isfinite(base)
    for row in (np.array([2.0, -2.0, 2.0, 1.0]), np.array([-2.0, 2.0, -2.0, 1.0]), np.zeros(4) + [0, 0, 0, 1]):
        for label in (1.0, -1.0):
            X2, y2 = X.copy(), y.copy()
            X2[0], y2[0] = row, label
            other, _ = _compare(X2, y2, w, 0.3, 4.0, 0.01)
            assert abs(other - base) <= delta * (1 + 1e-12)


@pytest.mark.parametrize("L, p, pm", [(50.0, 0.001, 0.2), (1e-3, 0.999999, 1e-9), (4.0, -3.0, 0.5)])
def test_the_noise_is_scaled_by_the_sensitivity_of_what_the_node_was_sent(L, p, pm):
    """Δ comes from what the node enforces — the margin clip L it was sent (its margins are clipped to it), p clipped
    to the p_min it was sent — never from a constant: the Laplace scale drawn is Δ(L, clip(p, pm, 1 − pm))/ε_c, and
    the worst-case neighbours' sums differ by exactly that Δ (so a Δ from the default L = 4 would under-noise at L = 50)."""
    X, y = _rows()
    w = np.array([30.0, -30.0, 30.0, 0.0])  # margins far beyond every L here: clipped to ±L
    pc = float(np.clip(p, pm, 1.0 - pm))
    delta = L + abs(math.log(pc) - math.log1p(-pc))
    value, events = _compare(X, y, w, p, L, pm)
    d = float(val.loss_difference(w, X, y, pc, L, pm).sum())
    assert value - d == pytest.approx(delta / EPS[1], rel=1e-9)
    assert events[0].epsilon == EPS[1]
    # the worst-case neighbours: record 0 at margin +L or −L (|x·w| = 180 > L), labelled +1 in one and −1 in the other
    shifts = []
    for row in (np.array([2.0, -2.0, 2.0, 1.0]), np.array([-2.0, 2.0, -2.0, 1.0])):
        X1, X2, y1, y2 = X.copy(), X.copy(), y.copy(), y.copy()
        X1[0] = X2[0] = row
        y1[0], y2[0] = 1.0, -1.0
        shifts.append(abs(_compare(X1, y1, w, p, L, pm)[0] - _compare(X2, y2, w, p, L, pm)[0]))
    assert max(shifts) == pytest.approx(delta, rel=1e-9)  # tight: Δ is what the node enforces, no less
