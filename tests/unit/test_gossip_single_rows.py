"""A noisy logistic run's float32 prepared rows (``mechanism.single_rows``): rounded toward zero, so the clips'
bound on every row holds as proved; the single-precision gradient sum within its derived error of the float64 one."""

from __future__ import annotations

import math

import numpy as np

from dpadmm.algorithms.gossip import mechanism as mech

R = 2.0  # below √d: many rows are clipped to norm R exactly


def _rows(n=5000, d=12, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(0.0, 3.0, (n, d))
    X[:, 0] = rng.choice([0.0, 1.0], n)
    X[0, 1], X[1, 2] = 1e-40, -3e-39  # map near the middle of their columns: below float32's normal range
    lo, hi = np.full(d, -5.0), np.full(d, 5.0)
    lo[0], hi[0] = 0.0, 1.0
    return mech.prepare(X, lo, hi, R, order="F"), np.where(rng.random(n) < 0.5, 1.0, -1.0)


def test_rounded_toward_zero_so_every_row_keeps_its_bound():
    Xt, _ = _rows()
    X64 = Xt.copy()
    X32 = mech.single_rows(Xt)
    assert X32.dtype == np.float32 and X32.flags.f_contiguous
    assert (np.abs(X32.astype(np.float64)) <= np.abs(X64)).all()  # no coordinate grows
    assert (np.abs(X32.astype(np.float64) - X64) <= 2.0 ** -23 * np.abs(X64) + 2.0 ** -126).all()
    assert (np.linalg.norm(X32.astype(np.float64), axis=1) <= math.sqrt(R * R + 1)).all()
    assert (X32[:, -1] == 1.0).all()
    # rows clipped to exactly norm R stay inside (round to nearest could leave them just outside)
    assert np.isclose(np.linalg.norm(X64[:, :-1], axis=1), R).any()


def test_single_precision_sum_within_its_error_bound():
    Xt, y = _rows()
    X64 = Xt.copy()
    X32 = mech.single_rows(Xt)
    w = np.random.default_rng(1).normal(0.0, 1.0, X64.shape[1])
    G32 = mech.gradient_sum(X32, y, w, single=True)
    G64 = mech.gradient_sum(X64, y, w)
    # per row: the weight moves by ≤ ¼|Δt| + a few float32 ulp (Δt: the rows', w's and the dot's rounding), the row by
    # ≤ 2⁻²³ per coordinate; the blocks' float32 accumulation by ≤ BLOCK·2⁻²³ of the absolute sum
    u = 2.0 ** -23
    dt = (X64.shape[1] + 3) * u * (np.abs(X64) @ np.abs(w))
    dc = 0.25 * dt + 8 * u
    bound = dc @ np.abs(X64) + u * np.abs(X64).sum(0) + mech.BLOCK * u * np.abs(X64).sum(0)
    assert (np.abs(G32 - G64) <= bound).all()
    assert np.abs(G32 - G64).max() > 0  # a different computation, not the float64 one again
    assert np.abs(G32 - G64).max() < 1e-4 * np.abs(G64).max()


def test_batched_sums_are_each_nodes_own():
    Xt, y = _rows()
    X32 = mech.single_rows(Xt)
    parts = [X32[:1700], X32[1700:]]
    W = np.random.default_rng(2).normal(0.0, 1.0, (2, X32.shape[1]))
    G = mech.gradient_sums([np.asfortranarray(p) for p in parts], y, W, single=True)
    for i, (p, ys) in enumerate(zip(parts, (y[:1700], y[1700:]))):
        np.testing.assert_array_equal(G[i], mech.gradient_sum(np.asfortranarray(p), ys, W[i], single=True))
