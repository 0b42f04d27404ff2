"""Each node's own recalibration of the consensus model on its own rows (Platt scaling): no release, no ε spent.

At the end of a private gossip run node i holds the consensus model ``w_i`` (the tail mean of its own broadcasts,
intercept last) and its own prepared rows ``x̃ = (z, 1)`` (:func:`.mechanism.prepare`). It fits two numbers on
them (Platt 1999, with his smoothed targets),

    (a_i, b_i) = argmin_{a, b} Σ_{(x, y) ∈ D_i} [log(1 + e^m) − t_y m],   m = a (w_i · x̃) + b,
    t_+ = (N_+ + 1)/(N_+ + 2),   t_− = 1/(N_− + 2)      (N_± the node's own label counts),

and uses ``w_i' = (a_i w_i[:d], a_i w_i[d] + b_i)`` — the same linear model on the same prepared rows, its scores
rescaled by a_i and shifted by b_i (:func:`recalibrate`).

**What it costs.** Nothing is released. The other nodes' guarantee is untouched: w_i is a post-processing of the
released broadcasts, and so is anything node i computes from it and its own rows. Node i's own rows enter w_i'
exactly, which costs node i nothing while the model stays with it; a node that *publishes* its recalibrated model
publishes a function of its own rows that no accountant covers. The consensus model w_i (the estimator's
``coefs_``, ``coef_`` their mean) stays the shareable output with the run's (ε, δ).

**Why.** A noise-limited run (a few hundred rows per node at ε ≤ 2) hands over a model that ranks the rows but is
overconfident: each round's gradient noise stays in the model, so its scores are too large. On AER::HMDA (1,904
rows, 5 nodes, ε = 1) Platt scaling on the pooled training scores took 0.2–0.3 of them; on six small tables none of
this module's choices saw (BENCHMARKS.md, "small tables") the consensus model was worse than the base rate in most
runs at ε = 1 (up to 1.16 against 0.68), each node's recalibrated model much less often. When the scores carry
nothing, a_i → 0 and b_i → the logit of the node's smoothed base rate: the node then predicts (nearly) its own base
rate, the least it has without the protocol. Platt's smoothed targets keep (a_i, b_i) finite when a node's rows are
separable by the scores, and are what keeps two parameters from overfitting a node of a hundred rows.

The fit is Newton's method on the two parameters (:func:`platt`; the loss is convex, every accepted step lowers
it): O(B) per iteration, a few iterations — about 1 ms for a node of 4,500 rows (a gossip run on it: ~25 ms).
"""

from __future__ import annotations

import math

import numpy as np

MAX_ITER = 50
TOL = 1e-13


def platt_targets(y: np.ndarray) -> np.ndarray:
    """Platt's smoothed targets: t_+ = (N_+ + 1)/(N_+ + 2) for a positive row, t_− = 1/(N_− + 2) for a negative."""
    pos = np.asarray(y) > 0
    n_pos = int(pos.sum())
    return np.where(pos, (n_pos + 1.0) / (n_pos + 2.0), 1.0 / (len(pos) - n_pos + 2.0))


def _loss_and_sigma(s: np.ndarray, t: np.ndarray, a: float, b: float) -> tuple[float, np.ndarray]:
    """The Platt loss Σ [log(1 + e^m) − t m] at (a, b) and σ(m), m = a s + b, from one exponential per row:
    with e = exp(−|m|), log(1 + e^m) = max(m, 0) + log1p(e) and σ(m) = (1 or e)/(1 + e) (no overflow for any m)."""
    m = a * s
    m += b
    e = np.abs(m)
    np.negative(e, out=e)
    np.exp(e, out=e)
    f = float(np.maximum(m, 0.0).sum() + np.log1p(e).sum() - t @ m)
    sig = np.where(m >= 0.0, 1.0, e)
    e += 1.0
    sig /= e
    return f, sig


def platt(scores: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(a, b) minimising the Platt loss of ``a·scores + b`` against the smoothed targets of ``y`` (±1 or 0/1),
    with a ≥ 0 — and (0, logit t̄), the node's smoothed base rate, when a score is not finite: a node does not turn
    the consensus model's ranking around on its own few rows (a negative slope there is the noise of a hundred rows,
    not a finding — on AER::SwissLabor, 140 rows per node, one node's unconstrained fit gave a = −0.66 and a test
    loss above its base rate).

    Newton's method from (1, 0) — the consensus model as it is, often near the answer — with step halving; it stops
    when the Newton decrement gᵀH⁻¹g/2 (the loss the next full step would still gain, to second order) is below
    ``TOL`` times the loss."""
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    t = platt_targets(np.asarray(y).reshape(-1))
    if s.shape != t.shape or s.size == 0:
        raise ValueError(f"platt needs one score per label, got {s.size} scores and {t.size} labels.")
    tbar = float(t.mean())
    base = (0.0, math.log(tbar / (1.0 - tbar)))
    if not np.all(np.isfinite(s)):  # a model without finite scores carries nothing: the smoothed base rate
        return base
    s2 = s * s
    a, b = 1.0, 0.0
    f, p = _loss_and_sigma(s, t, a, b)
    f0, p0 = _loss_and_sigma(s, t, *base)
    if f0 < f:  # start from the better of the model as it is and the base rate
        a, b, f, p = base[0], base[1], f0, p0
    for _ in range(MAX_ITER):
        r = p - t
        g0, g1 = float(r @ s), float(r.sum())
        v = p * (1.0 - p)
        h00, h01, h11 = float(v @ s2) + 1e-12, float(v @ s), float(v.sum()) + 1e-12
        det = h00 * h11 - h01 * h01
        if det > 0.0:  # Newton's step on the two parameters (the 2 × 2 Hessian inverted in closed form)
            d0, d1 = (h11 * g0 - h01 * g1) / det, (h00 * g1 - h01 * g0) / det
        else:
            d0, d1 = g0 / (h00 + h11), g1 / (h00 + h11)
        if 0.5 * (g0 * d0 + g1 * d1) <= TOL * max(1.0, abs(f)) or abs(d0) + abs(d1) <= 1e-9 * (1.0 + abs(a) + abs(b)):
            break  # the Newton decrement (or the step) at rounding level: converged
        k = 1.0
        while k > 1e-8:
            a1, b1 = a - k * d0, b - k * d1
            f1, p1 = _loss_and_sigma(s, t, a1, b1)
            if f1 <= f:
                break
            k *= 0.5
        else:
            break  # no step lowers the loss: at the minimum to rounding
        a, b, f, p = a1, b1, f1, p1
    if a < 0.0:  # the convex loss's minimum over a ≥ 0 is then on a = 0, where b is the logit of the mean target
        return base
    return float(a), float(b)


def recalibrate(Xt: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, float, float]:
    """Node-side: ``(w', a, b)`` with ``w' = (a w[:d], a w[d] + b)``, (a, b) = :func:`platt` of the node's own
    scores ``Xt @ w`` (``Xt`` its prepared rows, intercept column last) against its own labels ``y``."""
    w = np.asarray(w, dtype=np.float64)
    a, b = platt(np.asarray(Xt) @ w, y)
    out = a * w if a > 0 else np.zeros_like(w)  # a = 0: the node's smoothed base rate (whatever w holds)
    out[-1] += b
    return out, a, b
