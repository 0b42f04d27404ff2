"""Label-DP releases beyond two classes: k-ary randomized response (several classes) and randomized response on bins
(real-valued labels and counts; Ghazi et al., "Regression with Label Differential Privacy", ICLR 2023).

Threat model and relation
-------------------------
The label party holds the training labels; every other party (and anyone its messages reach) is the adversary and
may know every feature and every other label. Relation: **one training record's label changes** (the features are
the same) — :data:`~dpadmm.privacy.events.LABEL_CHANGE`. The label party releases its labels **once** through one
of the mechanisms below; every later message of a fit on the released labels is post-processing and costs nothing.

k-ary randomized response — :func:`k_randomized_response`
--------------------------------------------------------
Each label ``Y_i ∈ {0, …, K−1}`` is kept with probability ``e^ε/(e^ε + K − 1)`` and otherwise replaced by one of the
other K − 1 classes uniformly, independently per row. *Proof (pure ε).* For neighbours differing in row i only,
the other rows' outputs have the same law and ``P(ỹ_i = o | Y_i = a) ∈ {e^ε/Z, 1/Z}`` with ``Z = e^ε + K − 1`` the
same for every a, so every ratio ``P(ỹ | Y)/P(ỹ | Y')`` lies in ``[e^−ε, e^ε]``. K = 2 is the binary mechanism of
:func:`dpadmm.algorithms.vertical.label.randomized_response`. Nothing needs enforcing beyond the labels lying in
the K public classes (checked: a value outside is refused). Event: one ``PureDPRelease(party, 0, ε, LABEL_CHANGE)``.

Randomized response on bins — :func:`rr_on_bins`
-----------------------------------------------
For a real label (or a count) with a loss ℓ (squared, absolute, Huber, Poisson), total budget ε split as
``ε = ε_r + ε_p + ε_rr``:

1. *Range* ``[lo, hi]``: public (declared by the label party's operator), or DP (:func:`dp_label_range`, ε_r: the
   exponential mechanism for two quantiles on a public asinh grid; ε_r/2 each). Labels are clipped to it — the
   clip is what makes the next step's domain finite; it is not a premise of any sensitivity below.
2. *Prior*: the labels' histogram on ``m`` equal-width public bins of ``[lo, hi]`` plus Laplace noise
   (:func:`laplace_histogram`, ε_p). One label changing moves one count down by 1 and one up by 1: ℓ1
   sensitivity 2, enforced by counting (no clip needed), noise ``Lap(2/ε_p)`` per bin: ε_p-DP. The prior is the
   noisy counts clipped at 0 and normalised (post-processing; uniform if nothing is left).
3. *Bins*: Φ from bin centres to k output values minimising the expected loss under that prior
   (:func:`dpadmm.privacy.label_bins.optimal_bins`) — post-processing of steps 1–2 and public values.
4. *Release*: randomized response on the k outputs with the bin's Φ value as the true one, at ε_rr — the same
   mechanism as above with K = k, so ε_rr-DP for every fixed Φ (two labels in one bin have the same law).

*Proof of ε.* Steps 1, 2 and 4 are ε_r-, ε_p- and ε_rr-DP under the label relation, each given the outputs of the
steps before (step 4 is ε_rr-DP for every Φ; Φ is a function of the earlier outputs); by adaptive sequential
composition the released labels (with the range, the prior and Φ) are ``(ε_r + ε_p + ε_rr)``-DP, δ = 0. Events:
``PureDPRelease`` of ε_r (round −2), ε_p (round −1) and ε_rr (round 0), which the ledger adds.

Draws: the keep-or-change decision is ``u < P(change)`` with u uniform from ``rng.random`` (so a generator whose
uniforms are scaled — a planted bug — changes that probability), the replacement class from ``rng.integers``, the
Laplace noise as the difference of two exponentials drawn by ``rng.gamma(1, b)``, the range's Gumbel noise by
``rng.gumbel``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.special import expit

from .events import LABEL_CHANGE, PureDPRelease
from .label_bins import BIN_LOSSES, optimal_bins
from .ranges import SEARCH_LIMIT

#: the DP range's public grid: this many points evenly in asinh space over ±asinh(SEARCH_LIMIT) (6% apart)
RANGE_GRID = 513
#: the DP range's quantiles (lower, upper): central enough for the exponential mechanism to find them at a small ε
#: (it needs about ``4 ln(RANGE_GRID)/ε_r`` rows below the lower one: 250 at ε_r = 0.1)
RANGE_QUANTILES = (0.1, 0.9)
#: the DP range is the quantiles' interval widened by this fraction of its width on each side (post-processing)
RANGE_WIDEN = 0.5


def change_probability(epsilon: float, k: int) -> float:
    """``(k − 1)/(e^ε + k − 1)``: the probability that k-ary randomized response reports another value than the true
    one (each of the k − 1 others with a k − 1-th of it), without overflow; 0 for k = 1."""
    if k <= 1:
        return 0.0
    return float(expit(math.log(k - 1) - float(epsilon)))


def randomize_indices(index: np.ndarray, k: int, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """k-ary randomized response on indices ``0 ≤ index < k`` (module docstring): the true index with probability
    ``e^ε/(e^ε + k − 1)``, else one of the others uniformly."""
    index = np.asarray(index, dtype=np.int64)
    n = index.shape[0]
    if k <= 1:
        return index.copy()
    change = rng.random(n) < change_probability(epsilon, k)
    other = rng.integers(0, k - 1, size=n)
    other = other + (other >= index)  # one of the k − 1 indices ≠ the true one, uniformly
    return np.where(change, other, index)


def k_randomized_response(labels, n_classes: int, epsilon: float, *, rng: np.random.Generator,
                          party: str = "coordinator"):
    """The label party's one release of K-class labels ``0 … K−1`` (module docstring). Returns ``(ỹ, [event])``."""
    y = np.asarray(labels)
    k = int(n_classes)
    if k < 2 or not np.issubdtype(y.dtype, np.integer) and not (np.all(np.isfinite(y)) and np.all(np.mod(y, 1) == 0)):
        raise ValueError(f"labels must be class indices 0..{k - 1} (integers), with n_classes >= 2.")
    y = y.astype(np.int64)
    if y.size and (y.min() < 0 or y.max() >= k):
        raise ValueError(f"labels must lie in 0..{k - 1}; got a label {int(y.min() if y.min() < 0 else y.max())}.")
    return randomize_indices(y, k, epsilon, rng), [PureDPRelease(party, 0, float(epsilon), LABEL_CHANGE)]


def laplace_histogram(values: np.ndarray, edges: np.ndarray, epsilon: float, rng: np.random.Generator):
    """Counts of ``values`` in the bins ``[edges_j, edges_{j+1})`` (the ends clipped into the first and last bin) plus
    ``Lap(2/ε)`` each: ε-DP under one value changing (ℓ1 sensitivity 2). Returns (noisy counts, exact counts)."""
    m = edges.size - 1
    idx = np.clip(np.searchsorted(edges, values, side="right") - 1, 0, m - 1)
    exact = np.bincount(idx, minlength=m).astype(np.float64)
    b = 2.0 / float(epsilon)
    return exact + (rng.gamma(1.0, b, m) - rng.gamma(1.0, b, m)), exact


def dp_label_range(labels: np.ndarray, epsilon: float, rng: np.random.Generator) -> tuple[float, float]:
    """``[lo, hi]`` around the :data:`RANGE_QUANTILES` of the labels (widened by :data:`RANGE_WIDEN`), ε-DP (ε/2 each): the exponential mechanism on
    the public grid t (:data:`RANGE_GRID` points, asinh-spaced over ±:data:`~dpadmm.privacy.ranges.SEARCH_LIMIT`) with
    utility ``−|#{y ≤ t} − q n|`` (one label changing moves every count by at most 1: sensitivity 1), drawn by the
    Gumbel-max trick. Labels beyond the grid count at its ends."""
    s = math.asinh(SEARCH_LIMIT)
    grid = np.sinh(np.linspace(-s, s, RANGE_GRID))
    y = np.sort(np.asarray(labels, dtype=np.float64))
    ranks = np.searchsorted(y, grid, side="right").astype(np.float64)
    out = []
    for q in RANGE_QUANTILES:
        score = -np.abs(ranks - q * y.size) * (0.5 * float(epsilon) / 2.0)
        out.append(float(grid[int(np.argmax(score + rng.gumbel(size=grid.size)))]))
    lo, hi = min(out), max(out)
    if hi <= lo:  # one grid point: widen to its neighbours (public grid, post-processing)
        j = int(np.searchsorted(grid, lo))
        lo, hi = float(grid[max(j - 1, 0)]), float(grid[min(j + 1, grid.size - 1)])
    width = hi - lo
    return lo - RANGE_WIDEN * width, hi + RANGE_WIDEN * width


@dataclass
class BinsRelease:
    """What :func:`rr_on_bins` released and what it decided (all of it post-processing of the DP steps): the range,
    the bin edges, the noisy counts, Φ (``outputs``, ``assign``) and the budget split."""

    labels: np.ndarray
    events: list
    label_range: tuple
    edges: np.ndarray
    noisy_counts: np.ndarray
    outputs: np.ndarray
    assign: np.ndarray
    epsilons: dict = field(default_factory=dict)


def split_budget(epsilon: float, prior_fraction: float, range_fraction: float, dp_range: bool) -> dict:
    """``{"range": ε_r, "prior": ε_p, "rr": ε_rr}`` summing to ε (ε_r = 0 with a public range)."""
    eps = float(epsilon)
    if not eps > 0 or not (0 < prior_fraction < 1) or not (0 <= range_fraction < 1) \
            or prior_fraction + (range_fraction if dp_range else 0.0) >= 1:
        raise ValueError("need epsilon > 0 and 0 < prior_fraction (+ range_fraction with a DP range) < 1.")
    e_r = eps * range_fraction if dp_range else 0.0
    e_p = eps * prior_fraction
    return {"range": e_r, "prior": e_p, "rr": eps - e_r - e_p}


def rr_on_bins(labels, epsilon: float, *, rng: np.random.Generator, label_range=None, n_bins: int = 32,
               loss: str = "squared", huber_delta: float = 1.0, prior_fraction: float = 0.1,
               range_fraction: float = 0.1, party: str = "coordinator") -> BinsRelease:
    """The label party's one release of real-valued labels (module docstring, steps 1–4) at total ``epsilon``.

    ``label_range``: ``(lo, hi)`` declared public, or None for the DP range (``range_fraction`` of ε);
    ``prior_fraction``: the histogram's share of ε; ``n_bins``: m; ``loss``: what Φ minimises (one of
    :data:`~dpadmm.privacy.label_bins.BIN_LOSSES`). Returns a :class:`BinsRelease` (``labels``: ỹ, one of the k
    outputs per row; ``events``: its ``PureDPRelease`` events).
    """
    if loss not in BIN_LOSSES:
        raise ValueError(f"loss must be one of {BIN_LOSSES}, got {loss!r}.")
    y = np.asarray(labels, dtype=np.float64)
    if y.ndim != 1 or not np.all(np.isfinite(y)):
        raise ValueError("labels must be a finite 1-D array (drop or impute missing labels first).")
    eps = split_budget(epsilon, prior_fraction, range_fraction, label_range is None)
    events = []
    if label_range is None:
        lo, hi = dp_label_range(y, eps["range"], rng)
        events.append(PureDPRelease(party, -2, eps["range"], LABEL_CHANGE))
    else:
        lo, hi = (float(v) for v in label_range)
        if not (np.isfinite(lo) and np.isfinite(hi) and hi > lo):
            raise ValueError(f"label_range must be two finite numbers lo < hi, got {label_range!r}.")
    if loss == "poisson":
        lo = max(lo, 0.0)  # counts: the clip keeps the support non-negative
        hi = max(hi, lo + 1.0)
    return release_on_bins(np.clip(y, lo, hi), np.linspace(lo, hi, int(n_bins) + 1), eps, rng=rng, loss=loss,
                           huber_delta=huber_delta, party=party, events=events, label_range=(lo, hi))


def release_on_bins(yc, edges, eps: dict, *, rng: np.random.Generator, loss: str, huber_delta: float, party: str,
                    events: list, label_range: tuple) -> BinsRelease:
    """Steps 2–4 of the module docstring on labels ``yc`` already inside the public ``edges``: the Laplace prior
    (ε_p = ``eps["prior"]``), the optimal bins and randomized response on them (ε_rr = ``eps["rr"]``); appends their
    events to ``events`` (those of the range before them)."""
    noisy, _ = laplace_histogram(yc, edges, eps["prior"], rng)
    events.append(PureDPRelease(party, -1, eps["prior"], LABEL_CHANGE))
    mass = np.clip(noisy, 0.0, None)
    prior = mass / mass.sum() if mass.sum() > 0 else np.full(mass.size, 1.0 / mass.size)
    centres = 0.5 * (edges[:-1] + edges[1:])
    outputs, assign, _ = optimal_bins(centres, prior, eps["rr"], loss, huber_delta)
    bin_of = np.clip(np.searchsorted(edges, yc, side="right") - 1, 0, centres.size - 1)
    released = outputs[randomize_indices(assign[bin_of], outputs.size, eps["rr"], rng)]
    events.append(PureDPRelease(party, 0, eps["rr"], LABEL_CHANGE))
    return BinsRelease(released, events, label_range, edges, noisy, outputs, assign, eps)
