"""Vertical "independent experts": each party's own differentially private model, combined by the label party.

Why this protocol exists. In vertical ADMM sharing [Hu] every round a party sends its *per-row* share
``D_m x_m`` (an N-vector). Under a record relation, one row's share moves by up to ``2 R ‖x_m‖`` whatever the
other rows are, so each share coordinate needs noise of the order of the row's own signal: per-row releases
are local DP, and at ε ≤ 5 the label party can do nothing with them (BENCHMARKS.md, "Private utility on real
data": its refit keeps its own model at every ε ≤ 5 on every dataset). Without cryptography, any protocol in
which a per-row function of party m's training rows reaches another party has this problem. This protocol
sends **no per-row value computed from a party's features during training**:

1. the label party sends the training labels to every other party: exactly (the labels are then NOT protected,
   as in vertical ADMM without ``label_epsilon``), or once through randomized response at label ε
   (:func:`dpadmm.algorithms.vertical.label.randomized_response`; everything after is post-processing);
2. each other party m fits a ridge-logistic model on its own block (an intercept column included) and those
   labels, and perturbs its coefficient with Gaussian noise (output perturbation) — :func:`fit_expert`; the
   coefficient never leaves the party;
3. to score NEW records (a test set, new customers) each party sends its logit on them; the label party adds
   the others' logits, each minus the prior log-odds, to its own model's logit (:func:`combine`: a
   product of experts, exact when the parties' features are conditionally independent given the label).

What step 3 sends is post-processing of the DP coefficient (a function of it and of records outside the
training set), so the feature-side ε covers every release ever made from the training features, scoring of
new records included. The logit of a TRAINING row ``a_i·θ̃`` is not post-processing: it is a per-row function
of the protected row itself, outside the guarantee; so a party refuses to score rows that share an id with
its training rows (:mod:`.party`, which serves this protocol over the network: Setup, one
fit, logits on new records; the coefficient never leaves the party). The price: the parties' models are fitted separately, so
what the features explain jointly but not one party alone is lost, and correlated parties are over-counted.

Sensitivity (enforced, proof). Party m's objective is ``F(x) = (1/n) Σ_i log(1 + exp(−ỹ_i a_iᵀx)) + (λ/2)‖x‖²``
with ``a_i = (d_i, c)``: its row clipped to ``‖d_i‖ ≤ R`` by :func:`fit_expert` itself and a constant
column ``c = R``, so ``‖a_i‖ ≤ R_a = √2 R``. Replace one record (row i, and under a record relation its label
too): ``F − F'`` is ``(1/n)(ℓ_i − ℓ'_i)``, whose gradient has norm ≤ ``2 R_a / n`` (the logistic loss is
1-Lipschitz in the score). F is λ-strongly convex, so the minimisers satisfy
``‖x* − x'*‖ ≤ 2 R_a / (n λ)`` [Chaudhuri, Monteleoni & Sarwate 2011, Cor. 8]. The solver is run until
``‖∇F(x̂)‖ ≤ γ`` (checked; :class:`RuntimeError` otherwise), so ``‖x̂ − x*‖ ≤ γ/λ`` for either neighbour and
the enforced sensitivity is ``Δ = (2 R_a / n + 2 γ) / λ``. The release ``x̂ + N(0, σ² I)`` with ``σ = z Δ`` is a
Gaussian mechanism of noise multiplier z, accounted by dp-accounting (one release per party).

The ridge. Output perturbation's noise norm is about ``z Δ √d``; the party picks
``λ = max(λ_user, 2 z R_a √(d+1) / (n · noise_norm), 10⁻¹⁰ R²)`` so that it is at most ``noise_norm`` (½ by
default), from public quantities only (n, d, R, z): no data-dependent tuning, so no extra privacy cost (the last
term keeps the Newton system well conditioned whatever λ and noise norm a coordinator sends).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import scipy.sparse as sp

from ...data.prepare import clip_rows  # rows scaled to norm ≤ R, overflow-safe, sparse stays sparse
from ...exceptions import PrivacyPreconditionError
from ...kernels.losses import get_loss
from ...privacy.events import RECORD_REPLACE, GaussianRelease
from ...privacy.mechanisms import gaussian

#: solver tolerance on ‖∇F‖, relative to the data term's sensitivity 2 R_a / n (adds 1% to Δ)
GRADIENT_TOLERANCE = 0.005


def augment(D, R: float):
    """``[D, R·1]``: the party's rows with the intercept column (norm ≤ √2 R when ‖d_i‖ ≤ R)."""
    ones = np.full((D.shape[0], 1), float(R))
    return sp.hstack([D, sp.csr_matrix(ones)], format="csr") if sp.issparse(D) else np.hstack([D, ones])


#: a private fit's ridge is at least this times R² (the Hessian's scale): below it the coordinator's λ and noise-norm
#: could make the k×k Newton system numerically singular on collinear columns, and a solver failure (data-dependent)
#: would tell it so
LAMBDA_FLOOR = 1e-10


def expert_lambda(n: int, d: int, R: float, noise_multiplier: float, lam: float, noise_norm: float = 0.5) -> float:
    """The ridge a party uses: the larger of ``lam`` and the one whose output-perturbation noise has expected
    norm ≈ ``noise_norm`` (public inputs only)."""
    if noise_multiplier is None or not math.isfinite(noise_multiplier) or noise_multiplier <= 0:
        return float(lam)
    Ra = math.sqrt(2.0) * R
    return float(max(lam, 2.0 * noise_multiplier * Ra * math.sqrt(d + 1) / (n * noise_norm), LAMBDA_FLOOR * R * R))


#: row clips R for which the solver's sums (‖a‖² n ≤ 2R² n) stay in the float range: beyond, the Hessian overflows
R_RANGE = (1e-100, 1e100)


#: the least Δ and σ a private fit releases at: above it the coefficient, Δ and σ are normal floats (53-bit
#: precision). Below, a ridge near 1e308 sent by a coordinator (accepted as finite) puts Δ and σ among the subnormals,
#: where a few ulps of 5e-324 round Δ, σ = zΔ and the coefficient themselves: the noise drawn is not the Gaussian at
#: z the price assumes (red team 2026-11-29, X2)
NORMAL_FLOOR = 1e-280


def public_range_ok(R: float, lam: float, Delta: float, noise_multiplier: float | None = None) -> bool:
    """Whether the public quantities of a fit are in the range where the sensitivity proof holds as computed: R in
    :data:`R_RANGE`, λ finite > 0, Δ finite and ≥ :data:`NORMAL_FLOOR`, and σ = zΔ finite and ≥ it (an overflowed λ
    gives Δ = 0: an un-noised release; a subnormal Δ or σ is rounded to a few ulps)."""
    ok = R_RANGE[0] <= R <= R_RANGE[1] and 0 < lam < math.inf and NORMAL_FLOOR <= Delta < math.inf
    if ok and noise_multiplier is not None:
        ok = NORMAL_FLOOR <= float(noise_multiplier) * Delta < math.inf
    return bool(ok)


def sensitivity(n: int, R: float, lam: float) -> float:
    """Δ = (2 R_a/n + 2γ)/λ with γ = GRADIENT_TOLERANCE · 2 R_a/n (see the module docstring)."""
    Ra = math.sqrt(2.0) * R
    return (2.0 * Ra / n) * (1.0 + 2.0 * GRADIENT_TOLERANCE) / lam


def _solve(A, labels, lam: float, gtol: float, loss=None) -> np.ndarray:
    """Damped Newton on ``F`` (strongly convex; the Hessian is k×k with k = d+1 columns, formed in O(n k²)),
    then the checked gradient bound ``‖∇F‖ ≤ gtol``. ``loss``: a kernel loss (default the logistic one; the
    regression target's squared or Huber loss, :mod:`.regression`)."""
    loss = get_loss("logistic") if loss is None else loss
    n, k = A.shape
    AT = A.T.tocsr() if sp.issparse(A) else A.T

    def f(w):
        s = A @ w
        return (float(np.mean(loss.value(s, labels))) + 0.5 * lam * float(w @ w),
                np.asarray(AT @ (loss.grad(s, labels) / n)).ravel() + lam * w)

    w = np.zeros(k)
    target = max(gtol * 1e-6, 1e-14)  # solve well past the bound the proof needs; the check below is the bound
    if k > 1000:  # wide blocks: L-BFGS (O(nnz) per step) instead of a k×k Newton system, then the same check
        from scipy.optimize import minimize  # third-party, on the solver's fallback path only (start-up cost)

        w = minimize(f, w, jac=True, method="L-BFGS-B",
                     options={"maxiter": 20_000, "gtol": target, "ftol": 0.0, "maxcor": 30}).x
    val, grad = f(w)
    for _ in range(100):
        if float(np.linalg.norm(grad)) <= target:
            return w
        h = loss.hess(A @ w, labels) / n
        H = AT @ (A.multiply(h[:, None]) if sp.issparse(A) else A * h[:, None])
        H = np.asarray(H.toarray() if sp.issparse(H) else H) + lam * np.eye(k)
        step = np.linalg.solve(H, grad)
        t, gnorm = 1.0, float(np.linalg.norm(grad))
        while True:  # Armijo; near the optimum (values equal to rounding) a step that shrinks ‖∇F‖ is taken
            v_new, g_new = f(w - t * step)
            if v_new <= val - 1e-4 * t * float(grad @ step) or float(np.linalg.norm(g_new)) < 0.5 * gnorm or t < 1e-12:
                break
            t *= 0.5
        w, val, grad = w - t * step, v_new, g_new
    if not float(np.linalg.norm(grad)) <= gtol:  # a NaN gradient fails too
        # the message names no value computed from the data (it may reach the coordinator)
        raise RuntimeError(f"the expert's solver did not reach ‖∇F‖ ≤ {gtol:.3g}; its sensitivity bound would not "
                           "hold, so nothing is released")
    return w


def fit_expert(D, labels, *, R: float, lam: float, noise_multiplier: float | None, rng: np.random.Generator,
               party: str = "party2", noise_norm: float = 0.5):
    """One party's DP model on its own block (steps 2 of the module docstring).

    ``labels`` in {−1, +1} (exact or randomized-response labels); ``noise_multiplier`` z = σ/Δ, or ``None``
    for the non-private model. Returns ``(coef, info, events)``: ``coef`` has ``d + 1`` entries (the last
    multiplies the intercept column ``R``); ``info`` the public facts (λ used, Δ, σ); ``events`` one
    :class:`GaussianRelease` under the record relation (none when non-private).
    """
    labels = np.asarray(labels, dtype=np.float64)
    if labels.shape != (D.shape[0],) or not np.all(np.abs(labels) == 1.0):
        # the sensitivity proof needs ℓ 1-Lipschitz in the score: labels in {−1, +1}, one per row
        raise ValueError(f"party {party!r}: the labels it is sent must be one ±1 per row; nothing released")
    D = clip_rows(D, R)
    n, d = D.shape
    private = noise_multiplier is not None
    lam_used = expert_lambda(n, d, R, noise_multiplier, lam, noise_norm) if private else float(lam)
    A = augment(D, R)
    Delta = sensitivity(n, R, lam_used)
    if private and not public_range_ok(R, lam_used, Delta, noise_multiplier):
        raise PrivacyPreconditionError(
            f"party {party!r}: R = {R:g}, the ridge {lam_used:g} or the sensitivity {Delta:g} is outside the float range "
            f"the proof holds in (R in [{R_RANGE[0]:g}, {R_RANGE[1]:g}], λ finite > 0, Δ and σ finite ≥ 1e-280); nothing released; "
            "pass a row clip, λ and noise norm of ordinary size")
    gtol = GRADIENT_TOLERANCE * 2.0 * math.sqrt(2.0) * R / n
    try:
        w = _solve(A, labels, lam_used, gtol)
    except RuntimeError:
        raise
    except Exception:  # e.g. a singular system: one line naming no value computed from the data
        raise RuntimeError("the expert's solver failed; its sensitivity bound would not hold, so nothing is "
                           "released") from None
    info = {"lam": lam_used, "sensitivity": Delta, "sigma": 0.0, "rows": n, "columns": d}
    if not private:
        return w, info, []
    sigma = float(noise_multiplier) * Delta
    info["sigma"] = sigma
    return w + gaussian(rng, sigma, w.shape[0]), info, [GaussianRelease(party, 0, Delta, sigma, RECORD_REPLACE)]


def expert_logit(coef: np.ndarray, D, R: float, flip_probability: float | None = None) -> np.ndarray:
    """A party's logit on rows ``D`` (clipped as in training) from its model; with randomized-response labels
    the model estimates ``P(ỹ = 1)``, de-biased here to ``P(Y = 1) = (p̃ − q)/(1 − 2q)`` (clipped to
    [0.005, 0.995]). Post-processing of the DP coefficient."""
    s = np.asarray(augment(clip_rows(D, R), R) @ coef).ravel()
    if not flip_probability:
        return s
    q = float(flip_probability)
    p = np.clip((1.0 / (1.0 + np.exp(-np.clip(s, -50, 50))) - q) / (1.0 - 2.0 * q), 0.005, 0.995)
    return np.log(p) - np.log1p(-p)


def combine(own_logit: np.ndarray, expert_logits: Sequence[np.ndarray], prior_logit: float) -> np.ndarray:
    """The label party's product of experts: ``own + Σ_m (expert_m − prior)`` (logits)."""
    out = np.asarray(own_logit, dtype=np.float64).copy()
    for e in expert_logits:
        out += np.asarray(e, dtype=np.float64) - prior_logit
    return out
