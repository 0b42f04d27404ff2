"""A party's column bounds for raw-unit features, and the map that uses them: shared by every protocol.

A party holds raw rows in the user's units (a year column ≈ 2000 next to a 0/1 column). Before any mechanism
whose sensitivity assumes bounded rows, each party bounds its OWN columns — from bounds its operator declares,
or from a DP estimate of each column's range paid from its own budget — then maps every column to [−1, 1] by
those bounds (:func:`prepare`). A column keeps its scale relative to its bounds; no per-row normalisation erases
one column against another.

The DP range estimate (:func:`range_counts` and the bisection helpers) is a sequence of Gaussian releases of
threshold counts; the gossip protocol pools the counts of its nodes (:mod:`dpadmm.algorithms.gossip.node`),
a vertical party bisects on its own (:func:`dp_column_bounds`).

Range counts — :func:`range_counts`
-----------------------------------
*Query*: for public thresholds ``t ∈ R^{2×d}`` (chosen from earlier released sums), the counts
``c_{q,j} = #{x ∈ D : x_j ≤ t_{q,j}}``, q ∈ {lower, upper}; optionally the count of positive labels.
*Bound*: replacing one record changes each of the 2d counts (and the label count) by at most 1:
``Δ_r = √(2d)``, ``√(2d + 1)`` with the label count (:func:`range_sensitivity`); enforced by counting
indicators (no clip needed). *Noise*: ``N(0, (z_r Δ_r)² I)``. *Event*: ``GaussianRelease(party, round, Δ_r,
z_r Δ_r, RECORD_REPLACE)``. The bisection and the resulting bounds are post-processing of the noisy counts.
"""

from __future__ import annotations

import json
import math

import numpy as np

from ..kernels.norms import safe_norm
from .events import RECORD_REPLACE, GaussianRelease

#: public search range of the DP column bounds: |values| beyond it are clipped to it (declare bounds instead)
SEARCH_LIMIT = 1e6


def range_sensitivity(d: int, labels: bool = False) -> float:
    """Δ_r = √(2d) (√(2d + 1) with the count of positive labels): ℓ2 change of the threshold counts when one
    record is replaced."""
    return math.sqrt(2.0 * int(d) + (1.0 if labels else 0.0))


def prepare(X: np.ndarray, lo: np.ndarray, hi: np.ndarray, row_clip: float, *, order: str = "C") -> np.ndarray:
    """``x̃ = (z, 1)``: columns mapped to [−1, 1] by their bounds and clipped, rows clipped to norm ≤ R.
    The same map is the model's input at predict time. Shapes: X (B, d), lo/hi (d,) → (B, d + 1), in ``order``
    ("F": column-major, as a gossip node keeps its rows). Each step in place in the result: one (B, d + 1) array
    and the row norms' temporaries, the numbers of the same steps on fresh arrays."""
    X = np.asarray(X, dtype=np.float64)
    lo = np.asarray(lo, dtype=np.float64)
    width = np.asarray(hi, dtype=np.float64) - lo
    out = np.empty((X.shape[0], X.shape[1] + 1), order=order)
    Z = out[:, :-1]
    np.subtract(X, lo, out=Z)
    np.divide(Z, width, out=Z)
    np.clip(Z, 0.0, 1.0, out=Z)  # [column clip] (±inf → ±1)
    Z *= 2.0
    Z -= 1.0
    np.copyto(Z, 0.0, where=np.isnan(Z))  # a missing value (NaN) → the middle of its column: the bound holds for it too
    norms = safe_norm(Z, axis=1, keepdims=True)
    Z *= np.minimum(1.0, float(row_clip) / np.maximum(norms, 1e-300))  # [row clip] ‖z‖ ≤ R
    out[:, -1] = 1.0  # [intercept] ‖x̃‖² ≤ R² + 1
    return out


def sorted_columns(X: np.ndarray) -> np.ndarray:
    """(d, B): every column of ``X`` sorted (NaN last), for :func:`range_counts`'s ``columns``: a node that counts
    in several rounds sorts once and then counts by binary search."""
    return np.sort(np.ascontiguousarray(np.asarray(X, dtype=np.float64).T), axis=1)


def range_counts(name: str, round_: int, X: np.ndarray, thresholds: np.ndarray, noise_multiplier: float,
                 rng: np.random.Generator, y: np.ndarray | None = None, columns: np.ndarray | None = None):
    """Noisy ``#{x_j ≤ t_{q,j}}`` for the 2 × d public thresholds (and, given ``y``, ``#{y = +1}``) and its event
    (module docstring, release 2). Returns (counts (2, d), positives or None, events).

    ``columns``: :func:`sorted_columns` of the same ``X`` (the same counts: ``#{x_j ≤ t}`` is the number of sorted
    values ≤ t, NaN sorting last and counting in neither)."""
    X = np.asarray(X, dtype=np.float64)
    t = np.asarray(thresholds, dtype=np.float64)
    if columns is None:
        counts = np.stack([(X <= t[q][None, :]).sum(axis=0) for q in range(t.shape[0])]).astype(np.float64)
    else:
        counts = np.empty(t.shape)
        for j in range(t.shape[1]):
            counts[:, j] = columns[j].searchsorted(t[:, j], side="right")
    pos = None if y is None else float(np.count_nonzero(np.asarray(y) > 0))
    if noise_multiplier <= 0:
        return counts, pos, []
    delta = range_sensitivity(X.shape[1], labels=y is not None)
    sigma = float(noise_multiplier) * delta
    noisy = counts + sigma * rng.standard_normal(counts.shape)
    if pos is not None:
        pos = pos + sigma * float(rng.standard_normal())
    return noisy, pos, [GaussianRelease(name, int(round_), delta, sigma, RECORD_REPLACE)]


# ----------------------------------------------------------------------------- the hub's bisection (post-processing)
def search_bracket(d: int) -> tuple[np.ndarray, np.ndarray]:
    """Initial bisection bracket in asinh space for the lower and the upper quantile of every column."""
    s = math.asinh(SEARCH_LIMIT)
    return np.full((2, d), -s), np.full((2, d), s)


def thresholds(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The next public thresholds: the bracket midpoints, back in raw units."""
    return np.sinh(0.5 * (a + b))


def bisect(a: np.ndarray, b: np.ndarray, pooled_counts: np.ndarray, targets: np.ndarray):
    """One bisection step per column and quantile: a pooled count ≥ its target puts the quantile below the
    midpoint (shrink from above), otherwise above it."""
    mid = 0.5 * (a + b)
    below = pooled_counts >= targets[:, None]
    return np.where(below, a, mid), np.where(below, mid, b)


def bounds_from_bracket(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Column bounds: the outer ends of the two brackets (lower quantile's lower end, upper quantile's upper
    end). A column whose two quantiles coincide (e.g. a rare 0/1 indicator: both quantiles 0), or crossed by
    noise, gets ``[lo − s/2, hi + s/2]`` with ``s = max(1, |lo|, |hi|)``: its common value maps to the middle and
    the rare values to the ends, instead of every value to one end."""
    lo, hi = np.sinh(a[0]), np.sinh(b[1])
    scale = np.maximum(1.0, np.maximum(np.abs(lo), np.abs(hi)))
    flat = (hi - lo) < 0.01 * scale
    lo2 = np.where(flat, np.minimum(lo, hi) - 0.5 * scale, lo)
    hi2 = np.where(flat, np.maximum(lo, hi) + 0.5 * scale, hi)
    return lo2, hi2


def quantile_level(noise_multiplier: float, d: int, n_total: int, n_nodes: int, floor: float = 0.02) -> float:
    """Public quantile level q of the DP range: at least ``floor``, and high enough that the pooled count's noise
    (√N z_r Δ_r) is a third of the target q·n (a noisy count then rarely drives the bisection to the search
    limit); at most 0.25."""
    sd = math.sqrt(n_nodes) * noise_multiplier * range_sensitivity(d)
    return float(min(0.25, max(floor, 3.0 * sd / max(n_total, 1))))


# ----------------------------------------------------------------------------- one party, on its own rows
#: bisection steps of a DP range estimate (asinh space over ±SEARCH_LIMIT: resolution 0.2% of a value's magnitude)
RANGE_ROUNDS = 14
#: the share of a party's privacy budget (in 1/z², the Gaussian mechanism's additive currency) its range estimate
#: spends: z_r = z·√(K/share) for the K count rounds and z_o = z/√(1 − share) for the model's release, so that
#: the composition K/z_r² + 1/z_o² = 1/z² is that of the one release at the calibrated z
RANGE_SHARE = 0.1


def split_noise(z: float, rounds: int = RANGE_ROUNDS, share: float = RANGE_SHARE) -> tuple[float, float]:
    """``(z_range, z_model)``: one party's noise multipliers for its ``rounds`` range releases and its one model
    release, composing (Gaussian: exactly) to a single release at ``z`` (:data:`RANGE_SHARE`)."""
    return float(z) * math.sqrt(rounds / share), float(z) / math.sqrt(1.0 - share)


def dp_column_bounds(name: str, X, noise_multiplier: float, rng: np.random.Generator, *,
                     rounds: int = RANGE_ROUNDS, first_round: int = 0):
    """A party's DP bounds of its own columns: ``rounds`` bisection steps on its own noisy threshold counts
    (:func:`range_counts`, each a Gaussian release at ``noise_multiplier``), the public quantile level of
    :func:`quantile_level` (one party). Returns ``(lo, hi, events)``; the bounds are post-processing of the counts.
    A sparse block is counted as dense (its zeros are values)."""
    X = np.asarray(X.toarray() if hasattr(X, "toarray") else X, dtype=np.float64)
    n, d = X.shape
    q = quantile_level(noise_multiplier, d, n, 1)
    targets = np.array([q * n, (1.0 - q) * n])
    a, b = search_bracket(d)
    events: list = []
    for r in range(int(rounds)):
        counts, _, ev = range_counts(name, first_round + r, X, thresholds(a, b), noise_multiplier, rng)
        events += ev
        a, b = bisect(a, b, counts, targets)
    lo, hi = bounds_from_bracket(a, b)
    return lo, hi, events


def scale_columns(X, lo, hi, radius: float = 1.0) -> np.ndarray:
    """Every column mapped to [−1, 1] by its bounds (clipped there; NaN → 0), then the whole block multiplied by
    ``radius/√d`` — one public constant, not a per-row factor — so every row has ‖row‖ ≤ radius and no row clip
    fires. The same map at fit and at scoring time."""
    X = np.asarray(X.toarray() if hasattr(X, "toarray") else X, dtype=np.float64)
    lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
    if lo.shape != (X.shape[1],) or hi.shape != (X.shape[1],) or not np.all(np.isfinite(lo) & np.isfinite(hi)
                                                                              & (lo < hi)):
        raise ValueError(f"column bounds must be {X.shape[1]} finite pairs lo < hi, one per column; fix the bounds")
    Z = prepare(X, lo, hi, math.inf)[:, :-1]
    return Z * (float(radius) / math.sqrt(max(X.shape[1], 1)))


def read_bounds(path, columns: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Declared column bounds from a file: JSON ``{"lo": [...], "hi": [...]}`` or ``[[lo, hi], ...]``, or a CSV
    with a header and two rows (lo, hi) / columns ``lo,hi`` one row per column."""
    text = open(path, encoding="utf-8").read()
    try:
        obj = json.loads(text)
        if isinstance(obj, dict):
            lo, hi = obj["lo"], obj["hi"]
        else:
            lo, hi = [p[0] for p in obj], [p[1] for p in obj]
    except (ValueError, KeyError, TypeError, IndexError):
        rows = [r.split(",") for r in text.strip().splitlines() if r.strip()]
        body = [[float(v) for v in r] for r in rows[1:]]
        if rows and [c.strip() for c in rows[0]] == ["lo", "hi"]:
            lo, hi = [r[0] for r in body], [r[1] for r in body]
        else:
            if len(body) != 2:
                raise ValueError(f"{path}: a bounds CSV has a header and two rows (lo, hi), or columns lo,hi") from None
            lo, hi = body
    lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
    if columns is not None and lo.shape != (columns,):
        raise ValueError(f"{path} declares bounds for {lo.shape[0]} columns, the party's file has {columns}; "
                         "give one lo, hi per feature column")
    if lo.shape != hi.shape or not np.all(np.isfinite(lo) & np.isfinite(hi) & (lo < hi)):
        raise ValueError(f"{path}: every column needs finite bounds lo < hi; fix the bounds file")
    return lo, hi
