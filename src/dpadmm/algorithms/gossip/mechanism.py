"""The two releases of the gossip protocol and their proofs: column bounding, clipped gradient sums, range counts.

Preparation (:func:`prepare`) — the same map at fit and at predict time
-----------------------------------------------------------------------
A node holds raw rows ``x ∈ R^d`` in the user's units. With public column bounds ``lo < hi`` (declared by
the operator, or the DP estimate of :func:`range_counts`, a post-processing of released counts), every column
is mapped to [−1, 1] and clipped there, then the row is clipped to norm ``R`` and the intercept's 1 appended:

    z_j = 2·clip((x_j − lo_j)/(hi_j − lo_j), 0, 1) − 1,   z ← z·min(1, R/‖z‖),   x̃ = (z, 1).

A column keeps its own scale relative to its bounds (a year column ≈ 2000 and a 0/1 column both span
[−1, 1]); no row is rescaled up, and no row normalisation erases one column against another. A missing value
(NaN) maps to 0, the middle of its column, so every prepared row is finite whatever the raw row holds.

Release 1: the clipped gradient sum (every gradient round) — :func:`gradient_release`
--------------------------------------------------------------------------------------
*Relation*: ``RECORD_REPLACE`` — node i's dataset D_i and D_i' differ in one record (x, y) ↦ (x', y'),
any raw values and any label in {−1, +1}.
*Query*: ``G_i(w) = Σ_{(x,y)∈D_i} ∇_w ℓ(y, w·x̃) = Σ −y σ(−y w·x̃) x̃`` with ℓ the logistic loss and w the
point the node evaluates at (``w_mix`` below, a function of earlier broadcasts only: public given the
transcript, so the rounds compose adaptively).
*Bound*: each term is ``c·x̃`` with ``|c| = σ(·) ≤ 1`` and ``‖x̃‖² = ‖z‖² + 1 ≤ R² + 1`` (the clips), so
replacing one record changes G_i by at most ``‖c x̃‖ + ‖c' x̃'‖ ≤ 2√(R² + 1) = Δ`` (:func:`gradient_sensitivity`).
*Enforced by*: the column clip and the row clip in :func:`prepare` (called by the node on its own raw rows at
its first gradient round, whatever bounds arrived: only ``lo < hi`` finite is needed, checked by the node;
``node.node_step`` keeps the prepared rows and the bounds in its state, and :func:`gradient_release` computes
the sum on them),
in a noisy logistic run the prepared rows rounded toward zero to float32 after those clips (:func:`single_rows`:
no coordinate grows, so every stored row keeps ``‖x̃‖ ≤ √(R² + 1)``),
the appended constant 1, and ``σ(−t) = 1/(1 + eᵗ) ∈ [0, 1]`` as computed — in double precision, or in single
precision in a noisy release (``e ∈ [0, ∞]`` either way; :func:`_logistic_weights`, :func:`_sums_single`) — which
needs every margin ``t = y w·x̃`` to be a number, not NaN: the bounded point below.
*Bounded point* (whatever the neighbours or the router send): the node evaluates at
``w_mix = ⌊w_i + (⌊S_i⌋_{V_i W} − V_i w_i)/(1 + V_max)⌋_W`` (:func:`.node.gossip_mix`), where ``⌊·⌋_r`` is
:func:`bounded` — NaN ↦ 0, then every coordinate clipped to [−r, r] — and ``W = MODEL_BOUND = 10⁶`` is a public
protocol constant. A non-finite S_i is refused (data-independently: it is the sender's number); a finite one is
clipped to ``V_i W`` (what V_i neighbours in the box can sum to), and the node's own w_i is in the box (its broadcast
is ``⌊w_mix + ⌊v⌋_W⌋_W``, :func:`.node.heavy_ball`), so the mix is at most 3W per coordinate before its clip: no
overflow, no NaN, and ``|w_mix,j| ≤ W``. Every prepared coordinate has ``|x̃_j| ≤ 1`` (column clip to [−1, 1], a row
clip that only shrinks, the intercept 1), so each margin ``|w·x̃| ≤ (d + 1) W`` is finite in any summation order
(BLAS's included; in float32 too, whose largest number is 3.4·10³⁸), each weight is in [−1, 1], and G_i(w_mix) is a finite sum of terms ``c x̃``: Δ holds for every
point the adversary can induce. Without the box it does not: two rounds of sums ∓1.79·10³⁰⁸ overflow w_mix to
(−∞, …, +∞), and a margin ``z·(−∞) + ∞`` is NaN exactly for a row with a coordinate at or above the midpoint of the
bounds — a release finite on D and NaN on D′, ε = ∞ (finite but huge w_mix gives NaN through BLAS's overflowing
sums the same way); ``tests/protocols/test_gossip_bound.py`` replays that attack on every path. An honest run never
reaches W: with prepared coordinates in [−1, 1], a coefficient of 10⁶ is a margin where σ has long saturated in
double precision (|t| > 37), and honest iterates stay orders of magnitude below it — the golden fits
(``tests/protocols/test_fit_golden.py``) are bit for bit those without the box.
*Noise*: ``G̃_i = G_i + N(0, (z_g Δ)² I_{d+1})`` drawn from the node's own generator ``rng``.
*Event*: ``GaussianRelease(node, round, Δ, z_g Δ, RECORD_REPLACE)``.
*Post-processing*: everything the node broadcasts, ``w_i(t+1) = w_mix + β v_i(t) − η((N/n) G̃_i + λ w_mix)``,
is a fixed function of G̃_i and of values already public (its own and its neighbours' earlier broadcasts, the
public constants N, n, η, β, λ); the neighbours' consensus averaging of it is post-processing again.

Release 1 for the other losses — :mod:`.targets`
------------------------------------------------
Regression and several classes change only the per-example weight of the gradient, each bounded by the node
whatever it is sent (proofs in :mod:`.targets`): squared loss, labels mapped to [−1, 1] by the label bounds and
clipped, the prediction clipped to [−1, 1] inside the gradient, ``|r| ≤ 2``, ``Δ = 4√(R² + 1)`` (the box W alone
would give ``|r| ≤ (d + 1)W + 1``: useless); Huber, ``|r| ≤ δ``, ``Δ = 2δ√(R² + 1)``; softmax over K classes, one
release of the K(d + 1) stacked sum, ``‖p − e_y‖ ≤ √2``, ``Δ = 2√2·√(R² + 1)``. Without declared label bounds the
label is one more column of release 2 (``Δ_r = √(2(d + 1))``), priced with it.

Release 2: range counts (the first ``K`` rounds when the bounds are not declared) — :func:`range_counts`
(in :mod:`dpadmm.privacy.ranges`, with :func:`prepare` and the bisection: shared with the vertical protocols)
-------------------------------------------------------------------------------------------------------
*Query*: for public thresholds ``t ∈ R^{2×d}`` (chosen by the hub from earlier released sums), the counts
``c_{q,j} = #{x ∈ D_i : x_j ≤ t_{q,j}}``, q ∈ {lower, upper}.
In the first range round the node also counts its positive labels, ``#{y = +1}``.
*Bound*: replacing one record changes each of the 2d counts (and the label count) by at most 1:
``Δ_r = √(2d)``, ``√(2d + 1)`` with the label count (:func:`range_sensitivity`); enforced by counting
indicators (no clip needed).
*Noise*: ``N(0, (z_r Δ_r)² I)`` from the node's generator. *Event*: ``GaussianRelease(node, round, Δ_r,
z_r Δ_r, RECORD_REPLACE)``. The hub's bisection, the resulting bounds and the starting intercept (the logit of
the pooled noisy positive share) are post-processing of the sums. (z_g = z_r: the node's one noise multiplier.)

Accounting: each node's T (+ K) Gaussian releases compose adaptively; :mod:`.report` asks the project's
PLD accountant for the node's ε at δ (a failing accountant gives ε = ∞). ``tests/protocols/test_gossip.py``
checks Δ and Δ_r against worst-case neighbours numerically.
"""

from __future__ import annotations

import math

import numpy as np

from ...privacy.events import RECORD_REPLACE, GaussianRelease
# the column bounds and their DP range estimate live in privacy.ranges (shared with the vertical protocols); the
# names are re-exported here, where the gossip node and driver have always called them
from ...privacy.ranges import (SEARCH_LIMIT, bisect, bounds_from_bracket, prepare, quantile_level,  # noqa: F401
                               range_counts, range_sensitivity, search_bracket, sorted_columns, thresholds)


#: the public box every model vector a node evaluates at, keeps or broadcasts lies in: |w_j| ≤ MODEL_BOUND (release 1's
#: *Bounded point*). A protocol constant, data-independent; an honest run never reaches it (module docstring).
MODEL_BOUND = 1e6


def bounded(x, radius=MODEL_BOUND) -> np.ndarray:
    """``x`` in the public box ``[−radius, radius]`` (elementwise; ``radius`` a number or an array broadcasting with
    ``x``): NaN ↦ 0, ±∞ and anything beyond ↦ ±radius. A new float64 array, finite and bounded whatever ``x`` holds,
    and bit for bit ``x`` where every coordinate is finite and inside the box (an honest run's vectors)."""
    y = np.array(x, dtype=np.float64)  # a copy: never the caller's array
    np.copyto(y, 0.0, where=np.isnan(y))
    np.clip(y, -radius, radius, out=y)
    return y


def gradient_sensitivity(row_clip: float) -> float:
    """Δ = 2√(R² + 1): ℓ2 change of the clipped gradient sum when one record is replaced (module docstring)."""
    return 2.0 * math.sqrt(float(row_clip) ** 2 + 1.0)


def gradient_sum(Xt: np.ndarray, y: np.ndarray, w: np.ndarray, *, single: bool = False) -> np.ndarray:
    """``Σ −y σ(−y w·x̃) x̃`` over the prepared rows (the un-noised query G_i(w)).

    Computed as ``−((y / (1 + exp(clip(y · (x̃ w), ±500)))) @ x̃)``, each step in place on one vector
    (:func:`_logistic_weights`): the numbers of ``(−(y · expit(−clip(y · (x̃ w), ±500)))) @ x̃`` in fewer passes.
    scipy's ``expit(x)`` is ``1 / (1 + exp(−x))`` with the C library's ``exp``, which is numpy's float64 ``exp`` on a
    CPU without AVX-512 (with AVX-512 numpy uses its own, within an ulp); ``y · (1/q) = y/q`` for y = ±1; and
    negating every term of a sum negates the sum exactly.

    ``single=True`` (a noisy release, :func:`gradient_release`): the exponential in single precision
    (:func:`_logistic_weights`); every other step, the products and the sum stay in double precision."""
    if Xt.dtype == np.float32:
        return gradient_sums([Xt], y, w[None, :], single=True)[0]
    m = Xt @ w
    _logistic_weights(m, y, single)
    G = m @ Xt
    np.negative(G, out=G)
    return G


#: rows per block of a single-precision gradient round (:func:`single_rows`): margins and weights in float32, every
#: sum in float64
BLOCK = 1024


def single_rows(Xt: np.ndarray) -> np.ndarray:
    """A noisy logistic run's prepared rows as a node keeps them: :func:`prepare`'s float64 rows (every clip done in
    double precision) **rounded toward zero** to float32, column-major. Half the memory and half the traffic of a
    gradient round (two passes over the rows, memory-bound): ~1.7× faster per round.

    ``Xt`` (float64) is overwritten. *The bound still holds*: rounding toward zero never increases a coordinate's magnitude, so every stored
    coordinate has ``|x̃_j| ≤ 1`` and every row ``‖x̃‖ ≤ √(R² + 1)`` exactly as proved for the float64 row (the
    intercept's 1 is exact); Δ is a bound on the query computed on these rows (module docstring, release 1), and a
    weight computed in float32 (:func:`gradient_sums`) is still in [−1, 1] (``1 + e ≥ 1`` as rounded). A block's
    margins and weights are computed in single precision, its sum in double precision on an exact copy
    (:func:`_sums_single`; red team G1). A
    non-private run never uses this (its sums stay in float64: the zero-noise fit is the non-private one)."""
    bits = Xt.view(np.uint64)  # in place on the node's fresh float64 rows (they are dropped after)
    bits &= _KEEP  # truncate the significand to float32's 24 bits: toward zero
    np.copyto(Xt, 0.0, where=np.abs(Xt) < 2.0 ** -126)  # below float32's normal range: 0 (else astype could round up)
    return np.asfortranarray(Xt, dtype=np.float32)  # now exact


#: the float64 bits kept by :func:`single_rows` (sign, exponent, the top 23 stored significand bits)
_KEEP = np.uint64(0xFFFF_FFFF_E000_0000)


def column_major(Xt: np.ndarray) -> np.ndarray:
    """The prepared rows in column-major (Fortran) order, as the node keeps them for its gradient rounds.

    A gradient sum is two BLAS matrix-vector products on a tall, narrow matrix (B rows, d + 1 ≤ a few dozen
    columns). Row-major, ``x̃ w`` is B dot products of length d + 1 and ``m x̃`` B short axpys; column-major they are
    d + 1 long axpys and d + 1 long dot products, which BLAS vectorises: ~2× faster for both (1,000–5,000 rows,
    9–19 columns, OpenBLAS on one thread). The numbers are the same sums in another order (within an ulp per
    product). A no-op when ``Xt`` is already column-major (a restored checkpoint decodes row-major)."""
    return Xt if Xt.flags.f_contiguous else np.asfortranarray(Xt)


def _logistic_weights(m: np.ndarray, y: np.ndarray, single: bool = False) -> None:
    """In place: the margins ``m = x̃ w`` ↦ ``y σ(−y m)`` = ``y / (1 + exp(clip(y m, ±500)))`` (:func:`gradient_sum`).

    ``single=True``: ``t = y m`` rounded to float32, ``e = exp(t)`` in float32 (numpy's SIMD ``exp``; its float64
    ``exp`` is the C library's, one value at a time, on CPUs without AVX-512 — about 4× slower here, and most of
    a round's time), then ``y / (1 + e)`` in float64. Still ``|y σ| ≤ 1`` exactly (``e ∈ [0, ∞]``; ``e = ∞``
    beyond t ≈ 88.7 gives the weight ±0), so Δ holds as proved (module docstring). The weight's error: rounding t
    to float32 moves it by ≤ 2⁻²⁴|t| and float32 ``exp`` adds a few ulp, so σ moves by
    ≤ σ(1 − σ)(2⁻²⁴|t| + 2⁻²¹) ≤ 3·10⁻⁷ (σ(1 − σ)|t| ≤ 0.23), and by < e⁻⁸⁸ where float32 over- or underflows
    (``tests/unit/test_gossip_batch.py`` checks the bound on a fine grid of t). The sum over a node's B rows moves
    by ≤ 3·10⁻⁷ B √(R² + 1): for B = 10⁵ rows and R = 4 that is 0.13, against noise of standard deviation
    ``z Δ = 2 z √(R² + 1)`` ≥ 8 per coordinate at z ≥ 1 — a 60th of it at worst; different rows' errors do not
    all point one way in practice."""
    if m.dtype == np.float32:  # float32 margins (:func:`_sums_single`; ``y`` float32): every step in float32, in place
        m *= y
        with np.errstate(over="ignore"):  # |t| ≳ 88.7: e = ∞ (the weight ±0) or 0 (the weight ±1), as intended
            np.exp(m, out=m)
        m += np.float32(1.0)
    elif single:
        e = np.empty(m.shape, np.float32)
        with np.errstate(over="ignore"):  # |t| ≳ 88.7: e = ∞ (the weight ±0) or 0 (the weight ±1), as intended
            np.multiply(m, y, out=e, casting="same_kind")
            np.exp(e, out=e)
        np.add(e, 1.0, out=m, dtype=np.float64)
    else:
        m *= y
        np.maximum(m, -500.0, out=m)  # clip to [-500, 500]
        np.minimum(m, 500.0, out=m)
        np.exp(m, out=m)
        m += 1.0
    np.divide(y, m, out=m)


def gradient_sums(Xts, y: np.ndarray, W: np.ndarray, *, single: bool = False) -> np.ndarray:
    """Every node's :func:`gradient_sum` at once: row i is ``gradient_sum(Xts[i], y_i, W[i], single=single)``,
    ``y`` the nodes' labels concatenated in node order. The same numbers: each node's two products are its own
    (the same BLAS calls on its own rows), only the elementwise steps between them run once on the concatenated
    margins."""
    if single and Xts[0].dtype == np.float32:
        return _sums_single(Xts, y, W)
    m = np.empty(len(y))
    G = np.empty(W.shape)
    a = 0
    for Xt, w in zip(Xts, W):
        np.matmul(Xt, w, out=m[a:a + Xt.shape[0]])
        a += Xt.shape[0]
    _logistic_weights(m, y, single)
    a = 0
    for i, Xt in enumerate(Xts):
        np.matmul(m[a:a + Xt.shape[0]], Xt, out=G[i])
        a += Xt.shape[0]
    np.negative(G, out=G)
    return G


def _sums_single(Xts, y: np.ndarray, W: np.ndarray) -> np.ndarray:
    """:func:`gradient_sums` on float32 rows (:func:`single_rows`), one pass over the rows: for each block of
    :data:`BLOCK` rows of a node (in L2 while both products run), the margins ``x̃ w`` in float32 (w rounded to
    float32: ``|w_j| ≤ MODEL_BOUND`` keeps every margin finite), the weights ``y / (1 + exp(y m))`` in float32
    (|weight| ≤ 1: ``e ∈ [0, ∞]``), then the block's sum **in float64** on an exact double-precision copy of the
    block and its weights (in cache), added to the node's in float64. Rounding in the margins only moves weights
    inside [−1, 1], which Δ allows; the sum's rounding is double precision's, as in the float64 path (red team
    2026-11-29, G1: a float32 block sum could differ on worst-case neighbours by up to ≈ BLOCK²·2⁻²⁴ ≈ 6 % of Δ
    beyond it). Each step is elementwise or per row except the block's sum, so a node's release is the same
    whichever nodes are stepped with it (:mod:`.batch`)."""
    G = np.zeros(W.shape)
    W32 = W.astype(np.float32)
    y32 = y.astype(np.float32)
    buf = np.empty(BLOCK, np.float32)
    m64 = np.empty(BLOCK)
    X64 = np.empty((BLOCK, W.shape[1]), order="F")  # the block, exactly, in double precision (in cache)
    part = np.empty(W.shape[1])
    a = 0
    for i, (Xt, w) in enumerate(zip(Xts, W32)):
        for b in range(0, Xt.shape[0], BLOCK):
            Xb = Xt[b:b + BLOCK]
            nb = Xb.shape[0]
            m, yb = buf[:nb], y32[a + b:a + b + nb]
            np.matmul(Xb, w, out=m)
            _logistic_weights(m, yb, True)
            np.copyto(m64[:nb], m)  # exact: float32 values are float64 values
            Xd = X64 if nb == BLOCK else X64[:nb]
            np.copyto(Xd, Xb)
            np.matmul(m64[:nb], Xd, out=part)  # the block's sum in float64 (G1: not in float32)
            G[i] += part
        a += Xt.shape[0]
    np.negative(G, out=G)
    return G


def gradient_release(name: str, round_: int, Xt: np.ndarray, y: np.ndarray, row_clip: float, w: np.ndarray,
                     noise_multiplier: float, rng: np.random.Generator):
    """``G̃_i = G_i(w) + N(0, (z_g Δ)² I)`` and its event (module docstring, release 1). ``Xt`` is
    :func:`prepare` ``(X, lo, hi, row_clip)`` of the node's own raw rows with the same ``row_clip`` (the node
    prepares them once, at its first gradient round, and keeps them: its bounds are fixed from then on).
    A noisy release computes the logistic weights' exponential in single precision (:func:`_logistic_weights`:
    an error far below the noise, the same bound Δ).

    ``noise_multiplier = 0`` is a non-private run: the exact sum in double precision and no event (its report
    says ε = ∞)."""
    G = gradient_sum(Xt, y, w, single=noise_multiplier > 0)
    if noise_multiplier <= 0:
        return G, []
    delta = gradient_sensitivity(row_clip)
    sigma = float(noise_multiplier) * delta
    noisy = G + sigma * rng.standard_normal(G.shape[0])
    return noisy, [GaussianRelease(name, int(round_), delta, sigma, RECORD_REPLACE)]


def gradient_releases(names, round_: int, Xts, y: np.ndarray, row_clip: float, W: np.ndarray,
                      noise_multiplier: float, rngs):
    """Every node's :func:`gradient_release` at once (the in-process simulation's stacked round,
    :mod:`.batch`): node i's release is ``gradient_release(names[i], round_, Xts[i], y_i, row_clip, W[i],
    noise_multiplier, rngs[i])`` to the bit — its own sum on its own rows (:func:`gradient_sums`, ``y`` the
    nodes' labels concatenated), its own noise from its own generator, its own event. Returns ``(G̃, events)``:
    G̃ (N, d + 1), events[i] node i's list."""
    G = gradient_sums(Xts, y, W, single=noise_multiplier > 0)
    if noise_multiplier <= 0:
        return G, [[] for _ in names]
    delta = gradient_sensitivity(row_clip)
    sigma = float(noise_multiplier) * delta
    Z = np.empty(G.shape)
    for z, rng in zip(Z, rngs):
        rng.standard_normal(out=z)
    G += sigma * Z
    r = int(round_)
    return G, [[GaussianRelease(name, r, delta, sigma, RECORD_REPLACE)] for name in names]
