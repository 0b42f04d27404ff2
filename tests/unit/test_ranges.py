"""dpadmm.privacy.ranges: the shared column bounds of raw-unit features (gossip consensus and the vertical experts)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpadmm.algorithms.experts.prepare import noise_multipliers
from dpadmm.privacy.accountants import gaussian_epsilon
from dpadmm.privacy.ranges import RANGE_ROUNDS, dp_column_bounds, read_bounds, scale_columns, split_noise


def test_scaled_columns_keep_their_scale_and_rows_stay_inside_the_radius():
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.integers(1990, 2021, 500), rng.lognormal(10, 0.5, 500), rng.integers(0, 2, 500)])
    lo, hi = np.array([1990.0, 0.0, 0.0]), np.array([2020.0, 1e5, 1.0])
    Z = scale_columns(X, lo, hi, radius=0.7)
    assert np.linalg.norm(Z, axis=1).max() <= 0.7 + 1e-12
    # one public factor for every row: a column's values keep their order and their ratios of differences
    expect = (2 * np.clip((X - lo) / (hi - lo), 0, 1) - 1) * 0.7 / math.sqrt(3)
    np.testing.assert_allclose(Z, expect)
    with pytest.raises(ValueError, match="finite pairs lo < hi"):
        scale_columns(X, hi, lo)


def test_the_dp_range_brackets_the_bulk_of_each_column():
    rng = np.random.default_rng(1)
    X = np.column_stack([rng.normal(2005, 8, 5000), rng.lognormal(math.log(50_000), 0.4, 5000)])
    lo, hi, events = dp_column_bounds("p", X, 20.0, np.random.default_rng(2))
    assert len(events) == RANGE_ROUNDS and all(e.noise_multiplier == pytest.approx(20.0) for e in events)
    inside = np.mean((X >= lo) & (X <= hi), axis=0)
    assert np.all(inside > 0.9) and np.all(hi - lo < 20 * X.std(axis=0))


def test_the_budget_split_composes_to_the_party_epsilon():
    zr, zo = noise_multipliers(1.0, 1e-5, True)
    eps = gaussian_epsilon([zr] * RANGE_ROUNDS + [zo], 1e-5, "pld")
    assert 0.999 <= eps <= 1.0
    z = split_noise(3.0)
    assert RANGE_ROUNDS / z[0] ** 2 + 1 / z[1] ** 2 == pytest.approx(1 / 9.0)


def test_bounds_files(tmp_path):
    p = tmp_path / "b.csv"
    p.write_text("lo,hi\n1990,2020\n0,100000\n")
    lo, hi = read_bounds(p, 2)
    assert lo.tolist() == [1990, 0] and hi.tolist() == [2020, 100000]
    j = tmp_path / "b.json"
    j.write_text('{"lo": [0], "hi": [1]}')
    with pytest.raises(ValueError, match="declares bounds for 1 columns, the party's file has 2"):
        read_bounds(j, 2)
    j.write_text('{"lo": [2], "hi": [1]}')
    with pytest.raises(ValueError, match="finite bounds lo < hi"):
        read_bounds(j)


def test_prepare_in_column_major_order_is_the_same_numbers():
    """``prepare(..., order="F")`` (a gossip node's rows, ready for its BLAS products) holds the row-major result's
    numbers bit for bit, missing and infinite values included, and every row within the clip."""
    from dpadmm.privacy.ranges import prepare

    rng = np.random.default_rng(4)
    X = rng.standard_normal((500, 6)) * 4.0
    X[::7, 2], X[3, 1], X[4, 0], X[5] = np.nan, np.inf, -np.inf, np.nan
    lo, hi = np.full(6, -3.0), np.full(6, 2.0)
    for R in (0.5, 2.0, np.inf):
        C, F = prepare(X, lo, hi, R), prepare(X, lo, hi, R, order="F")
        assert C.flags.c_contiguous and F.flags.f_contiguous
        assert np.ascontiguousarray(F).tobytes() == C.tobytes()
        assert np.all(np.isfinite(F)) and np.all(F[:, -1] == 1.0)
        assert np.all(np.linalg.norm(F[:, :-1], axis=1) <= min(R, np.sqrt(6)) * (1 + 1e-12))
