"""The output bins of randomized response on bins (Ghazi et al., "Regression with Label Differential Privacy",
ICLR 2023): the map Φ from a label's bin to one of k output values that minimises the expected loss under a prior.

Randomized response on the outputs ``o_1 < … < o_k`` reports ``Φ(y)`` with probability ``e^ε/(e^ε + k − 1)`` and
each other output with probability ``1/(e^ε + k − 1)``. Under a prior P on the label's support points
``c_1 < … < c_m`` its expected loss is

    ``L(Φ) = Σ_j [ (e^ε − 1) Σ_{i: Φ(c_i) = o_j} P_i ℓ(o_j, c_i) + Σ_i P_i ℓ(o_j, c_i) ] / (e^ε + k − 1)``

(each label is reported as Φ(y) with weight e^ε and as every output with weight 1). Ghazi et al. (Thm 3) prove the
optimal Φ is non-decreasing: the outputs partition the support into k contiguous intervals. Given the partition, the
bracket is a sum over intervals of a cost that depends on the interval and its output only, so the optimum over
partitions with k intervals is a dynamic programme over the interval's right end (:func:`optimal_bins`), and the
best k is the one whose optimum divided by ``e^ε + k − 1`` is least.

Here each interval's output is the best of a public grid of candidate values (:data:`GRID_PER_POINT` per support
point, spanning the support; for the Poisson loss only positive values): the paper's algorithm takes each
interval's exact minimiser — the grid optimum is within the grid's spacing of it, which costs utility only.
Nothing here touches a label: the prior is already a differentially private estimate (or public), so Φ is
post-processing and any Φ keeps randomized response ε-DP (:mod:`dpadmm.privacy.label_mechanisms`).
"""

from __future__ import annotations

import math

import numpy as np

#: losses the bins can be optimised for (ℓ(o, y): o the released value, y the true one)
BIN_LOSSES = ("squared", "absolute", "huber", "poisson")
#: candidate outputs per support point (the grid spans the support evenly)
GRID_PER_POINT = 4
#: the Poisson loss's outputs are at least this fraction of the support's largest |value| (ℓ needs o > 0)
POISSON_FLOOR = 1e-3


def bin_loss(loss: str, o: np.ndarray, y: np.ndarray, huber_delta: float = 1.0) -> np.ndarray:
    """ℓ(o, y) elementwise (broadcast): squared ``(o − y)²``, absolute ``|o − y|``, Huber at ``huber_delta``
    (``½r²`` for ``|r| ≤ δ``, else ``δ(|r| − δ/2)``), Poisson log loss ``o − y log o`` (o > 0; y ≥ 0 a count)."""
    r = np.asarray(o, dtype=np.float64) - np.asarray(y, dtype=np.float64)
    if loss == "squared":
        return r * r
    if loss == "absolute":
        return np.abs(r)
    if loss == "huber":
        a = np.abs(r)
        return np.where(a <= huber_delta, 0.5 * r * r, huber_delta * (a - 0.5 * huber_delta))
    if loss == "poisson":
        o = np.asarray(o, dtype=np.float64)
        return o - np.asarray(y, dtype=np.float64) * np.log(o)
    raise ValueError(f"loss must be one of {BIN_LOSSES}, got {loss!r}.")


def candidate_outputs(support: np.ndarray, loss: str) -> np.ndarray:
    """The public grid of output values: ``GRID_PER_POINT · m`` points evenly over [c_1, c_m] (positive for the
    Poisson loss)."""
    lo, hi = float(support[0]), float(support[-1])
    if loss == "poisson":
        lo = max(lo, POISSON_FLOOR * max(abs(hi), 1.0))
        hi = max(hi, lo)
    return np.linspace(lo, hi, GRID_PER_POINT * support.size)


def interval_costs(support: np.ndarray, prior: np.ndarray, epsilon: float, loss: str,
                   huber_delta: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """For every interval ``[a, b)`` of support indices (0 ≤ a < b ≤ m): the least bracket term
    ``(e^ε − 1) Σ_{a ≤ i < b} P_i ℓ(o, c_i) + Σ_i P_i ℓ(o, c_i)`` over the candidate outputs o, and that o.
    Returns (cost (m + 1, m + 1), +inf where a ≥ b; output (m + 1, m + 1))."""
    grid = candidate_outputs(support, loss)
    L = prior[None, :] * bin_loss(loss, grid[:, None], support[None, :], huber_delta)  # (G, m)
    S = np.concatenate([np.zeros((grid.size, 1)), np.cumsum(L, axis=1)], axis=1)  # (G, m + 1)
    total = S[:, -1]
    w = math.expm1(min(float(epsilon), 700.0))
    inside = S[:, None, :] - S[:, :, None]  # (G, a, b): Σ_{a ≤ i < b}
    cost = w * inside + total[:, None, None]
    best = np.argmin(cost, axis=0)
    value = np.take_along_axis(cost, best[None], axis=0)[0]
    m1 = support.size + 1
    value = np.where(np.arange(m1)[:, None] < np.arange(m1)[None, :], value, np.inf)
    return value, grid[best]


def optimal_bins(support, prior, epsilon: float, loss: str = "squared", huber_delta: float = 1.0,
                 max_outputs: int | None = None) -> tuple[np.ndarray, np.ndarray, float]:
    """The non-decreasing Φ minimising the expected loss of randomized response on bins (module docstring).

    ``support``: the label's m support points, increasing; ``prior``: their probabilities (≥ 0, summing to 1);
    ``max_outputs``: cap on k (default m). Returns ``(outputs (k,), assign (m,), expected loss)``: support point i is
    mapped to ``outputs[assign[i]]``.
    """
    support = np.asarray(support, dtype=np.float64)
    prior = np.asarray(prior, dtype=np.float64)
    m = support.size
    cost, out = interval_costs(support, prior, epsilon, loss, huber_delta)
    k_max = m if max_outputs is None else max(1, min(int(max_outputs), m))
    E = cost[0].copy()  # E[b]: best cost of covering [0, b) with j intervals (j = 1 now)
    back = [np.zeros(m + 1, dtype=int)]
    best_val, best_k = E[m] / (math.exp(min(float(epsilon), 700.0)) + 0.0), 1
    for j in range(2, k_max + 1):
        total = E[:, None] + cost  # (a, b): j − 1 intervals on [0, a), the j-th on [a, b)
        arg = np.argmin(total, axis=0)
        E = total[arg, np.arange(m + 1)]
        back.append(arg)
        val = E[m] / (math.exp(min(float(epsilon), 700.0)) + j - 1)
        if val < best_val * (1.0 - 1e-9):  # a tie keeps the fewer outputs
            best_val, best_k = val, j
    ends, b = [], m  # walk the intervals of the best k back from the right end
    for j in range(best_k, 0, -1):
        a = int(back[j - 1][b]) if j > 1 else 0
        ends.append((a, b))
        b = a
    ends.reverse()
    outputs = np.array([out[a, b] for a, b in ends])
    assign = np.concatenate([np.full(b - a, j) for j, (a, b) in enumerate(ends)])
    return outputs, assign, float(best_val)
