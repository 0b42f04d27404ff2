"""Release 1 of the gossip protocol for targets beyond yes/no: regression (squared, Huber) and several classes
(multinomial softmax). The binary logistic release and its proof are :mod:`.mechanism`'s; everything else there
(column map, row clip, the public model box, range counts, the accountant) is unchanged and assumed here.

Common premises (enforced by the node, :func:`.mechanism.prepare` and :func:`.mechanism.bounded`): every prepared row
``x̃ = (z, 1)`` has ``‖x̃‖² ≤ R² + 1``, and the point w the node evaluates at is in the public box
``|w_j| ≤ MODEL_BOUND``, so every margin ``w·x̃`` is a finite number. *Relation*: ``RECORD_REPLACE`` — node i's
dataset changes in one record (x, y) ↦ (x', y'), any raw row and any label (any real label, or any class).

Regression — :func:`regression_sums`
------------------------------------
*Label map* (the node's own, at its first gradient round): with public label bounds ``lo_y < hi_y`` (declared by
the operator, or a DP estimate: the label is one more column of the range counts, :func:`.mechanism.range_counts`,
paid from the same budget at ``Δ_r = √(2(d + 1))``), ``u = 2·clip((y − lo_y)/(hi_y − lo_y), 0, 1) − 1 ∈ [−1, 1]``
(:func:`scale_labels`; a NaN label ↦ 0, so the bound holds for any label the node holds).

*Squared loss*: the node's per-example gradient is ``r x̃`` with ``r = clip(w·x̃, −P, P) − u`` and P =
``PREDICTION_CLIP`` = 1 (the label range): the derivative of the loss ``ℓ(m) = ½(m − u)²`` on ``|m| ≤ P``
continued linearly beyond (its derivative ``clip(m, −P, P) − u`` is non-decreasing: convex, 1-smooth, and the
squared loss wherever a prediction is inside the label range — the least-squares model whenever its fitted values
are; the predictor is clipped to the label range anyway). Why not the model box: with only ``|w_j| ≤ W`` the residual
is bounded by ``(d + 1)W + 1`` — Δ of order 10⁷·√(R² + 1), noise that would drown any signal; clipping the prediction
is what makes the bound useful. *Bound*: ``|r| ≤ P + 1 = 2``, so ``‖r x̃‖ ≤ 2√(R² + 1)`` and replacing one record
moves the sum by ``Δ = 2(P + 1)√(R² + 1) = 4√(R² + 1)``.

*Huber loss* (``huber_delta`` = δ in scaled label units, > 0): ``r = clip(w·x̃ − u, −δ, δ)``, the derivative of
Huber's loss; ``|r| ≤ δ`` whatever w, so ``Δ = 2δ√(R² + 1)``. Both bounds need no assumption on w beyond a finite
margin (clip maps ±huge to ±P or ±δ; the box keeps it finite).

Several classes — :func:`multinomial_sums`
------------------------------------------
The model is K rows ``W_k ∈ R^{d + 1}`` (flattened row-major: the broadcast is a vector of K(d + 1) numbers, every
coordinate in the same public box), labels are class indices y ∈ {0, …, K − 1}. Per example the softmax
cross-entropy's gradient is ``(p − e_y) x̃ᵀ`` with ``p = softmax(W x̃)`` (computed stably: the margins minus their
maximum, so every exponential is in (0, 1] and the sum ≥ 1). *Bound*: ``‖p − e_y‖² = (1 − p_y)² + Σ_{k≠y} p_k²
≤ (1 − p_y)² + (Σ_{k≠y} p_k)² = 2(1 − p_y)² ≤ 2`` (a private node's label outside the K classes is no class,
weight ``p``: ``‖p‖² ≤ ‖p‖₁² = 1``; it is not refused, :func:`node_labels`), and ``‖a bᵀ‖_F = ‖a‖‖b‖``, so each term has Frobenius norm
``≤ √2·√(R² + 1)`` and ``Δ = 2√2·√(R² + 1)`` for the stacked sum — the K classes share one release and one
accounting (no K-fold composition, unlike one-vs-rest's K binary sums at Δ = 2√(R² + 1) each: √K·Δ together).

*Noise and events* as release 1: ``G̃ = G + N(0, (zΔ)² I)`` (I of the release's dimension), one
``GaussianRelease(node, round, Δ, zΔ, RECORD_REPLACE)`` per round; the broadcast is post-processing. The accountant
(:mod:`.report`) composes the events whatever their Δ (it reads σ/Δ): the plan calibrates z once over every release.

Smoothness (the public step η = 1/L): ``L = c (R² + 1) + λ`` with c = 1/4 (logistic), 1/2 (softmax: the Hessian of
log-sum-exp is ≤ ½ I in spectral norm), 1 (squared with the prediction clip, Huber).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...exceptions import InvalidParameterError
from ...privacy.events import RECORD_REPLACE, GaussianRelease

LOSSES = ("logistic", "squared", "huber", "multinomial")
PREDICTION_CLIP = 1.0  # P: the squared loss's prediction clip, in scaled label units (the label range)


@dataclass(frozen=True)
class Target:
    """The public loss of a run: ``loss`` (LOSSES), ``classes`` K (≥ 2 with multinomial, usually ≥ 3; 2 otherwise),
    ``huber_delta`` δ (Huber, scaled label units)."""

    loss: str = "logistic"
    classes: int = 2
    huber_delta: float = 1.0

    def __post_init__(self):
        if self.loss not in LOSSES:
            raise InvalidParameterError(f"loss must be one of {', '.join(LOSSES)}, got loss={self.loss!r}.")
        if self.loss == "multinomial" and int(self.classes) < 2:
            raise InvalidParameterError(f"multinomial needs at least 2 classes, got {self.classes}: give labels of "
                                        "two classes or more.")
        if not (isinstance(self.huber_delta, (int, float)) and math.isfinite(self.huber_delta)
                and self.huber_delta > 0):
            raise InvalidParameterError(f"huber_delta must be a finite number > 0, got {self.huber_delta!r}.")

    @property
    def regression(self) -> bool:
        return self.loss in ("squared", "huber")

    @property
    def outputs(self) -> int:
        """Rows of the model: K for multinomial, else 1."""
        return int(self.classes) if self.loss == "multinomial" else 1

    @property
    def weight_bound(self) -> float:
        """The bound on a per-example gradient's weight: |σ| ≤ 1, |r| ≤ P + 1, |r| ≤ δ, ‖p − e_y‖ ≤ √2."""
        return {"logistic": 1.0, "squared": PREDICTION_CLIP + 1.0, "huber": float(self.huber_delta),
                "multinomial": math.sqrt(2.0)}[self.loss]

    @property
    def curvature(self) -> float:
        """c of L = c(R² + 1) + λ (module docstring)."""
        return {"logistic": 0.25, "multinomial": 0.5}.get(self.loss, 1.0)

    def sensitivity(self, row_clip: float) -> float:
        """Δ = 2 · weight bound · √(R² + 1) (module docstring)."""
        return 2.0 * self.weight_bound * math.sqrt(float(row_clip) ** 2 + 1.0)


def node_labels(y, target: Target, private: bool = False) -> np.ndarray:
    """The node's labels as its loss reads them: ±1 (logistic: y > 0 is +1), the real labels (regression; a NaN is
    mapped to the middle of the label range by :func:`scale_labels`), class indices 0…K−1 (multinomial). A label that
    is not a class index below K is refused at Setup in a non-private run; in a ``private`` one it is index K, "no
    class" (:func:`softmax_weights`): K is the coordinator's choice, and a refusal that depends on the labels would
    tell it, un-noised, whether the node holds a record of class ≥ K (tests/redteam/test_gossip_setup_probes.py)."""
    if target.loss == "logistic":
        return np.where(np.asarray(y, dtype=np.float64) > 0, 1.0, -1.0)
    if target.regression:
        return np.asarray(y, dtype=np.float64).reshape(-1)
    v = np.asarray(y, dtype=np.float64).reshape(-1)
    ok = np.isfinite(v) & (v == np.round(v)) & (v >= 0) & (v < target.classes)
    if not private and not np.all(ok):
        raise InvalidParameterError(f"multinomial labels must be class indices 0..{target.classes - 1}.")
    return np.where(ok, v, target.classes).astype(np.intp)


def scale_labels(y, lo: float, hi: float) -> np.ndarray:
    """u = 2·clip((y − lo)/(hi − lo), 0, 1) − 1 ∈ [−1, 1], NaN ↦ 0 (module docstring)."""
    u = 2.0 * np.clip((np.asarray(y, dtype=np.float64) - lo) / (hi - lo), 0.0, 1.0) - 1.0
    return np.where(np.isnan(u), 0.0, u)


def unscale(u, lo: float, hi: float) -> np.ndarray:
    """The label map's inverse: scaled predictions back to the label's units."""
    return lo + (np.asarray(u, dtype=np.float64) + 1.0) * (0.5 * (hi - lo))


def residuals(m: np.ndarray, u: np.ndarray, target: Target) -> np.ndarray:
    """The per-example weights r of the regression gradient (module docstring): |r| ≤ ``target.weight_bound``."""
    if target.loss == "squared":
        return np.clip(m, -PREDICTION_CLIP, PREDICTION_CLIP) - u
    return np.clip(m - u, -target.huber_delta, target.huber_delta)


def regression_sums(Xt: np.ndarray, u: np.ndarray, w: np.ndarray, target: Target) -> np.ndarray:
    """``Σ r x̃`` over the prepared rows (the un-noised query)."""
    return residuals(Xt @ w, u, target) @ Xt


def softmax_weights(M: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``p − e_y`` per row of the margins M (B, K), stably (module docstring): each row's norm ≤ √2; ``y = K`` (a
    private node's label outside the classes, :func:`node_labels`) is no class: ``p``, norm ≤ ‖p‖₁ = 1."""
    P = M - M.max(axis=1, keepdims=True)
    np.exp(P, out=P)
    P /= P.sum(axis=1, keepdims=True)
    known = y < P.shape[1]
    P[np.flatnonzero(known), y[known]] -= 1.0
    return P


def multinomial_sums(Xt: np.ndarray, y: np.ndarray, w: np.ndarray, classes: int) -> np.ndarray:
    """``Σ (p − e_y) x̃ᵀ`` flattened row-major (K(d + 1),): the un-noised query at the flattened model w."""
    W = w.reshape(int(classes), Xt.shape[1])
    return (softmax_weights(Xt @ W.T, y).T @ Xt).ravel()


def target_sum(Xt: np.ndarray, y: np.ndarray, w: np.ndarray, target: Target) -> np.ndarray:
    """The un-noised query of a non-logistic target (``y``: scaled labels or class indices)."""
    if target.loss == "multinomial":
        return multinomial_sums(Xt, y, w, target.classes)
    return regression_sums(Xt, y, w, target)


def target_release(name: str, round_: int, Xt: np.ndarray, y: np.ndarray, row_clip: float, w: np.ndarray,
                   noise_multiplier: float, rng: np.random.Generator, target: Target):
    """``G̃ = G(w) + N(0, (zΔ)² I)`` and its event, Δ = ``target.sensitivity(R)`` (module docstring);
    ``noise_multiplier = 0``: the exact sum and no event."""
    G = target_sum(Xt, y, w, target)
    if noise_multiplier <= 0:
        return G, []
    delta = target.sensitivity(row_clip)
    sigma = float(noise_multiplier) * delta
    noisy = G + sigma * rng.standard_normal(G.shape[0])
    return noisy, [GaussianRelease(name, int(round_), delta, sigma, RECORD_REPLACE)]


def mean_loss(Xt: np.ndarray, y: np.ndarray, w: np.ndarray, target: Target) -> float:
    """Monitoring: the mean training loss at w (un-noised; refused in private runs like every diagnostic)."""
    if target.loss == "multinomial":
        M = Xt @ w.reshape(int(target.classes), Xt.shape[1]).T
        mx = M.max(axis=1)
        return float(np.mean(mx + np.log(np.exp(M - mx[:, None]).sum(axis=1)) - M[np.arange(len(y)), y]))
    r = Xt @ w - y
    if target.loss == "huber":
        a, dl = np.abs(r), float(target.huber_delta)
        return float(np.mean(np.where(a <= dl, 0.5 * r * r, dl * (a - 0.5 * dl))))
    return float(np.mean(0.5 * r * r))


__all__ = ["LOSSES", "PREDICTION_CLIP", "Target", "mean_loss", "multinomial_sums", "node_labels", "regression_sums", "residuals",
           "scale_labels", "softmax_weights", "target_release", "target_sum", "unscale"]
