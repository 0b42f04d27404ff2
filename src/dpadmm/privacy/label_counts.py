"""Label DP for counts: randomized response on bins over clipped counts (Ghazi et al., "Regression with Label
Differential Privacy", ICLR 2023, with the Poisson loss), pure ε — :func:`rr_on_counts`.

Threat model and relation
-------------------------
As for every label release of :mod:`dpadmm.privacy.label_mechanisms`: the label party holds the training labels —
here counts ``Y_i ∈ {0, 1, 2, …}`` (a visit count, a claim count); every other party (and anyone its messages reach)
is the adversary and may know every feature and every other label. Relation: **one training record's label
changes** (to any other count; the features and the number of rows n, public in vertical learning, stay) —
:data:`~dpadmm.privacy.events.LABEL_CHANGE`. The labels are released **once**; every later message of a fit on the
released labels is post-processing.

Mechanism (total ε split as ``ε = ε_r + ε_p + ε_rr``)
----------------------------------------------------
1. *Upper bound* U ≥ 1: declared by the label party's operator (public, ε_r = 0), or DP (:func:`dp_count_upper`,
   ε_r): AboveThreshold (Dwork & Roth 2014, Alg. 1 and Thm 3.23) over the public increasing integer grid
   :data:`COUNT_GRID` t_1 < t_2 < …, queries ``f_j = #{i: Y_i ≤ t_j}`` and threshold ``q n`` (q =
   :data:`COUNT_QUANTILE`): the first j with ``f_j + Lap(4/ε_r) ≥ q n + Lap(2/ε_r)`` (the last grid point if none);
   the bound is t_j times :data:`COUNT_WIDEN`, rounded up (post-processing). The lower end is 0, public: counts are
   non-negative (checked: a negative or fractional label is refused). (An exponential mechanism over the grid would
   tie every point beyond the largest count and, with hundreds of them, pick one of those at a few thousand rows;
   the scan stops at the first point past the quantile.)
2. *Clip*: ``Y_i ↦ min(Y_i, U)``, row by row: neighbours stay neighbours (one row differs). The clip is what makes
   the next step's domain finite; it is not a premise of a sensitivity below.
3. *Public bins*: unit bins centred on 0, 1, …, U when U + 1 ≤ m (``n_bins``), else m equal bins of [−½, U + ½].
4. *Prior*: the clipped counts' histogram on those bins plus ``Lap(2/ε_p)`` per bin — one label changing moves one
   count down by 1 and one up by 1 (ℓ1 sensitivity 2, enforced by counting): ε_p-DP
   (:func:`~dpadmm.privacy.label_mechanisms.laplace_histogram`).
5. *Bins*: Φ from the bins to k output values minimising the expected Poisson loss ``o − y log o`` of the release
   under that prior (:func:`~dpadmm.privacy.label_bins.optimal_bins`; outputs > 0): post-processing of 1–4.
6. *Release*: k-ary randomized response on the outputs with Φ(bin of the clipped count) as the true one, at ε_rr —
   ``P(ỹ_i = o | Y_i) ∈ {e^{ε_rr}/Z, 1/Z}``, ``Z = e^{ε_rr} + k − 1`` the same for every label: ε_rr-DP for every
   fixed Φ.

*Proof of ε.* Steps 1, 4 and 6 are ε_r-, ε_p- and ε_rr-DP under the label relation, each given the outputs of the
steps before (each query of step 1 has sensitivity 1 — a count ``#{Y_i ≤ t}`` moves by at most 1 when one label
changes — so AboveThreshold with those noise scales releases its index ε_r-DP; steps 2, 3 and 5 are functions of public
values, earlier outputs and, for the clip, of each row's own label). By adaptive sequential composition the released
labels — with U, the noisy prior and Φ — are ``(ε_r + ε_p + ε_rr)``-DP, δ = 0. Events: ``PureDPRelease`` of ε_r
(round −2, only with the DP bound), ε_p (round −1) and ε_rr (round 0): the same events as the real-valued release
:func:`~dpadmm.privacy.label_mechanisms.rr_on_bins`, which the ledger adds.

The released labels are positive reals (the outputs of Φ), so the Poisson loss ``e^s − ỹ s`` takes them as they are.

Draws: as :func:`~dpadmm.privacy.label_mechanisms.rr_on_bins` (uniforms for the keep-or-change decision from
``rng.random``, so a generator whose uniforms are scaled — the ×½-noise plant — changes that probability), and the
bound's Laplace noise as the difference of two exponentials drawn by ``rng.gamma(1, b)``.
"""

from __future__ import annotations

import math

import numpy as np

from .events import LABEL_CHANGE, PureDPRelease
from .label_mechanisms import BinsRelease, release_on_bins, split_budget
from .ranges import SEARCH_LIMIT

#: the DP bound's public grid: the integers 1 … SEARCH_LIMIT, every one up to 64 then about 3% apart
COUNT_GRID = np.unique(np.concatenate([np.arange(1, 65), np.round(np.geomspace(64, SEARCH_LIMIT, 330))]))
#: the quantile the DP bound estimates (AboveThreshold's rank error is a few times 4/ε_r rows: ±100 at ε_r = 0.1)
COUNT_QUANTILE = 0.95
#: the bound is the quantile times this, rounded up (post-processing): the top counts are clipped less often
COUNT_WIDEN = 1.5


def check_counts(labels) -> np.ndarray:
    """The labels as a float array of non-negative integers, or a ``ValueError`` naming the first bad one."""
    y = np.asarray(labels, dtype=np.float64)
    if y.ndim != 1 or not np.all(np.isfinite(y)):
        raise ValueError("count labels must be a finite 1-D array (drop or impute missing labels first).")
    bad = (y < 0) | (np.mod(y, 1.0) != 0)
    if bad.any():
        raise ValueError(f"count labels must be non-negative integers; got {y[bad][0]:g} (use the real-valued "
                         "release, loss 'squared' or 'huber', for other labels).")
    return y


def _laplace(scale: float, size, rng: np.random.Generator):
    return rng.gamma(1.0, scale, size) - rng.gamma(1.0, scale, size)


def dp_count_upper(labels: np.ndarray, epsilon: float, rng: np.random.Generator) -> int:
    """U = ⌈:data:`COUNT_WIDEN` · t⌉ for t the first point of :data:`COUNT_GRID` whose noisy count of labels at or
    below it passes ``q n`` (AboveThreshold, ε-DP: module docstring, step 1). Every query's noise is drawn at once
    (independent per query, as the mechanism needs; no loop)."""
    y = np.sort(np.asarray(labels, dtype=np.float64))
    ranks = np.searchsorted(y, COUNT_GRID, side="right").astype(np.float64)
    threshold = COUNT_QUANTILE * y.size + float(_laplace(2.0 / float(epsilon), None, rng))
    above = ranks + _laplace(4.0 / float(epsilon), COUNT_GRID.size, rng) >= threshold
    t = float(COUNT_GRID[int(np.argmax(above))] if above.any() else COUNT_GRID[-1])
    return max(1, int(math.ceil(COUNT_WIDEN * t)))


def count_edges(upper: int, n_bins: int) -> np.ndarray:
    """The public bin edges of step 3: unit bins centred on 0 … U when U + 1 ≤ m, else m equal bins of [−½, U + ½]."""
    if upper + 1 <= n_bins:
        return np.arange(upper + 2, dtype=np.float64) - 0.5
    return np.linspace(-0.5, upper + 0.5, int(n_bins) + 1)


def rr_on_counts(labels, epsilon: float, *, rng: np.random.Generator, upper: int | None = None, n_bins: int = 32,
                 prior_fraction: float = 0.1, range_fraction: float = 0.1, party: str = "coordinator") -> BinsRelease:
    """The label party's one release of count labels (module docstring) at total ``epsilon``.

    ``upper``: U declared public (an integer ≥ 1), or None for the DP bound (``range_fraction`` of ε);
    ``prior_fraction``: the histogram's share of ε; ``n_bins``: m. Returns a
    :class:`~dpadmm.privacy.label_mechanisms.BinsRelease` (``labels``: ỹ > 0, one of the k outputs per row;
    ``label_range``: (0, U); ``events``: its ``PureDPRelease`` events).
    """
    y = check_counts(labels)
    if upper is not None and not (float(upper) >= 1 and float(upper) == int(upper)):
        raise ValueError(f"upper must be an integer >= 1 (the largest count the release keeps), got {upper!r}.")
    if int(n_bins) < 2:
        raise ValueError(f"n_bins must be an integer >= 2, got {n_bins!r}.")
    eps = split_budget(epsilon, prior_fraction, range_fraction, upper is None)
    events = []
    if upper is None:
        upper = dp_count_upper(y, eps["range"], rng)
        events.append(PureDPRelease(party, -2, eps["range"], LABEL_CHANGE))
    upper = int(upper)
    return release_on_bins(np.minimum(y, upper), count_edges(upper, int(n_bins)), eps, rng=rng, loss="poisson",
                           huber_delta=1.0, party=party, events=events, label_range=(0.0, float(upper)))


__all__ = ["COUNT_GRID", "COUNT_QUANTILE", "COUNT_WIDEN", "check_counts", "count_edges", "dp_count_upper",
           "rr_on_counts"]
