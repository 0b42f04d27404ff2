"""The experts protocol's regression target: each feature party's output-perturbed ridge (squared or Huber loss).

The protocol is :mod:`.model`'s (one round; the label party sends its training labels, every other party fits and
perturbs its own model once, keeps it, and answers predictions on NEW records only) with a real-valued label:

1. the label party declares its label range ``[lo, hi]`` (public: its operator's, never read off the labels in a
   private run), clips its labels to it and sends ``y' = (clip(y) − c)/h ∈ [−1, 1]`` with ``c = (lo + hi)/2`` and
   ``h = (hi − lo)/2`` (:func:`scale_labels`); the labels are NOT protected (they are sent exactly, as in the binary
   experts without ``label_epsilon``) — or, with ``label_epsilon``, it sends instead its one release by randomized
   response on bins of ``[lo, hi]`` (:mod:`.driver_regression`): every released value lies in ``[lo, hi]``, so the
   scaled labels are in [−1, 1] and the proof below applies to them unchanged (it assumes nothing else of the labels);
2. party m clips what it receives to ``[−1, 1]`` and its rows to ``‖d_i‖ ≤ R`` itself, whatever it was sent, fits
   ``F(x) = (1/n) Σ_i ℓ(a_iᵀx − y'_i) + (λ/2)‖x‖²`` with ``a_i = (d_i, R)`` (``‖a_i‖ ≤ R_a = √2 R``) and ℓ the squared
   loss ``½r²`` or the Huber loss of threshold κ, and releases ``x̂ + N(0, σ² I)`` (:func:`fit_regression_expert`);
3. its prediction ``a·x̃`` on new records (post-processing of the release) goes to the label party, which stacks
   them with its own model (:mod:`.stack`).

Sensitivity (enforced, proof). A bound on the minimiser of either neighbour first. Both losses satisfy
``0 ≤ ℓ(r) ≤ ½r²`` and are convex, so ``F(x*) ≤ F(0) ≤ ½`` (``|y'_i| ≤ 1``) and ``(λ/2)‖x*‖² ≤ F(x*)`` give
``‖x*‖ ≤ ρ = 1/√λ`` (Huber). For the squared loss ``x* = (BᵀB + λI)⁻¹Bᵀ(y'/√n)`` with ``B = A/√n``: the operator has
norm ``max_s s/(s² + λ) ≤ 1/(2√λ)`` over B's singular values and ``‖y'/√n‖ ≤ 1``, so ``ρ = 1/(2√λ)``. On the ball
``‖x‖ ≤ ρ`` a residual is ``|a_iᵀx − y'_i| ≤ R_a ρ + 1``, and ``|ℓ'(r)| ≤ |r|`` (squared) or ``≤ κ`` (Huber), so
every per-row gradient ``ℓ'(r) a_i`` there has norm ≤ ``L = R_a (R_a/(2√λ) + 1)`` (squared) or
``L = R_a min(κ, R_a/√λ + 1)`` (Huber). Replace
one record (row and label): ``F' − F = (1/n)(ℓ'_i − ℓ_i)``. F is λ-strongly convex and ``∇F'(x'*) = 0``, so
``λ‖x* − x'*‖² ≤ (∇F(x'*) − ∇F(x*))ᵀ(x'* − x*) = −(∇F' − ∇F)(x'*)ᵀ(x'* − x*)``, whence
``‖x* − x'*‖ ≤ ‖∇ℓ_i(x'*) − ∇ℓ'_i(x'*)‖/(nλ) ≤ 2L/(nλ)`` (``x'*`` is in the ball). The solver is run to
``‖∇F(x̂)‖ ≤ γ``, so ``‖x̂ − x*‖ ≤ γ/λ`` (strong convexity, whatever algorithm found x̂) and the enforced
sensitivity is ``Δ = (2L/n + 2γ)/λ`` (:func:`sensitivity`). That the solver reaches γ is a theorem, not a check on
the data (a data-dependent refusal would tell the coordinator about one record: red team 2026-11-29, X1):
damped Newton first; if it stops short (or its system fails), the accelerated gradient method below from x = 0 for
a PUBLIC number of steps T (:func:`fallback_steps`), whose output is released.

Enforced by (the fallback's step count, Huber loss). ℓ'' ≤ 1 and ``‖a_i‖ ≤ R_a`` make F β-smooth with
``β = R_a² + λ`` (taken ``R_a²(1 + 1e-9) + λ`` against the rows' rounding) and it is λ-strongly convex; write
``q = β/λ``. At 0, ``|ℓ'(−y'_i)| ≤ min(κ, 1)``, so ``‖∇F(0)‖ ≤ G₀ = R_a min(κ, 1)`` and ``‖x*‖ ≤ G₀/λ``. Nesterov's
method for strongly convex functions (steps 1/β, momentum ``(√q − 1)/(√q + 1)``; Bubeck, *Convex Optimization:
Algorithms and Complexity*, Thm 3.18) gives ``F(y_t) − F* ≤ ((λ + β)/2)‖x₁ − x*‖² e^{−(t−1)/√q}``, and β-smoothness
``‖∇F(y)‖² ≤ 2β(F(y) − F*)``; so ``‖∇F(y_t)‖ ≤ √(q(q+1)) G₀ e^{−(t−1)/(2√q)}``, which is ≤ γ/2 (half of γ kept as
the float margin) once ``t − 1 ≥ 2√q ln(2√(q(q+1)) G₀/γ)``: T steps, T = 1 + ⌈that⌉, from n, R, λ, κ only. Since
``L ≥ G₀``, ``G₀/γ ≤ 100n``. A private Huber fit's ridge is at least :data:`HUBER_LAMBDA_FLOOR` ``· R²`` = 1e-5 R²,
so ``q ≤ 1 + 2·10⁵``, ``√q ≤ 447.3`` and T ≤ 1 + 894.5·ln(4·10⁷ n): 21,800 steps at n = 10³, 28,000 at 10⁶, 34,200
at 10⁹ (two matrix–vector passes each, so under 10⁵ passes for n up to 10¹⁶). The computed ‖∇F‖ of the output is
still compared with γ; a failure there would be a bug (the theorem excludes it) and raises
:class:`AssertionError`, never a protocol refusal. (Which branch ran is not in the release: both outputs satisfy
the same bound. Their running times differ; a timing channel is outside the threat model of the record relation.) The release with ``σ = zΔ`` is a Gaussian mechanism of noise
multiplier z under the record relation, accounted like the binary one (one release per party, dp-accounting PLD).

The ridge. As in :func:`.model.expert_lambda`, the party picks the smallest λ ≥ max(``lam``, floor·R²) (floor
1e-10, or :data:`HUBER_LAMBDA_FLOOR` for the Huber loss) at which the noise norm
``zΔ√(d+1)`` is at most ``noise_norm`` — from public quantities only (n, d, R, z, κ) — solving the monotone
equation in λ by bisection (:func:`expert_lambda`).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from ...data.prepare import clip_rows
from ...exceptions import InvalidParameterError, PrivacyPreconditionError
from ...kernels.losses import HuberLoss, SquaredLoss
from ...privacy.events import RECORD_REPLACE, GaussianRelease
from ...privacy.mechanisms import gaussian
from .model import GRADIENT_TOLERANCE, LAMBDA_FLOOR, NORMAL_FLOOR, R_RANGE, _solve, augment, public_range_ok

#: a private Huber fit's ridge is at least this times R²: it bounds the condition number q ≤ 1 + 2·10⁵ of F, so the
#: fallback's public step count (:func:`fallback_steps`) stays affordable (module docstring, "Enforced by")
HUBER_LAMBDA_FLOOR = 1e-5
#: float margin on the rows' norm in the smoothness constant β = R_a²(1 + margin) + λ
_BETA_MARGIN = 1e-9

#: the regression losses of the experts protocol (the binary target's is "logistic")
LOSSES = ("squared", "huber")
#: the default Huber threshold, in the scaled label's units (the label range's half-width is 1)
HUBER_KAPPA = 0.5


def check_loss(loss: str, huber_kappa: float = HUBER_KAPPA) -> tuple[str, float]:
    """``(loss, κ)`` checked: a loss of :data:`LOSSES` and, for Huber, a finite κ > 0 (one clear error otherwise)."""
    if loss not in LOSSES:
        raise InvalidParameterError(f"loss must be one of {', '.join(LOSSES)} for a regression target, got {loss!r}")
    k = float(huber_kappa)
    if not (math.isfinite(k) and k > 0):
        raise InvalidParameterError(f"huber_kappa must be a finite number > 0, got {huber_kappa!r}; pass e.g. 0.5")
    return loss, k


def check_label_range(label_range) -> tuple[float, float]:
    """A declared label range ``(lo, hi)``: two finite numbers, lo < hi (one clear error otherwise)."""
    try:
        lo, hi = (float(v) for v in label_range)
    except (TypeError, ValueError):
        raise InvalidParameterError(f"label_range must be two numbers (lo, hi), got {label_range!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and hi > lo):
        raise InvalidParameterError(f"label_range must be two finite numbers lo < hi, got {label_range!r}")
    return lo, hi


def scale_labels(y, lo: float, hi: float) -> np.ndarray:
    """Step 1: ``(clip(y, lo, hi) − c)/h`` in [−1, 1] (``c``, ``h`` the range's centre and half-width)."""
    c, h = 0.5 * (lo + hi), 0.5 * (hi - lo)
    return np.clip((np.clip(np.asarray(y, dtype=np.float64), lo, hi) - c) / h, -1.0, 1.0)


def unscale(s, lo: float, hi: float) -> np.ndarray:
    """A prediction in the scaled units back in the label's raw units."""
    return 0.5 * (lo + hi) + 0.5 * (hi - lo) * np.asarray(s, dtype=np.float64)


def lipschitz(R: float, lam: float, loss: str, kappa: float) -> float:
    """L, the bound on every per-row gradient at any point of the ball ‖x‖ ≤ ρ the minimisers lie in (module
    docstring)."""
    Ra = math.sqrt(2.0) * R
    if loss == "huber":
        return Ra * min(kappa, Ra / math.sqrt(lam) + 1.0)
    return Ra * (Ra / (2.0 * math.sqrt(lam)) + 1.0)


def sensitivity(n: int, R: float, lam: float, loss: str, kappa: float) -> float:
    """Δ = (2L/n + 2γ)/λ with γ = GRADIENT_TOLERANCE · 2L/n (module docstring)."""
    return (2.0 * lipschitz(R, lam, loss, kappa) / n) * (1.0 + 2.0 * GRADIENT_TOLERANCE) / lam


def tolerance(n: int, R: float, lam: float, loss: str, kappa: float) -> float:
    """γ = GRADIENT_TOLERANCE · 2L/n, the solver's bound; the smallest of the quantities Δ is computed through (L,
    2L/n), so ``γ ≥ NORMAL_FLOOR`` keeps every one of them a normal float (a tiny κ·R made L subnormal and Δ as
    computed up to 2% below its exact value: red team 2026-11-29, H1)."""
    return GRADIENT_TOLERANCE * 2.0 * lipschitz(R, lam, loss, kappa) / n


def scale_ok(n: int, R: float, lam: float, Delta: float, noise_multiplier, loss: str, kappa: float) -> bool:
    """:func:`.model.public_range_ok` and a normal-float tolerance γ (:func:`tolerance`): public quantities only."""
    return public_range_ok(R, lam, Delta, noise_multiplier) and tolerance(n, R, lam, loss, kappa) >= NORMAL_FLOOR


def expert_lambda(n: int, d: int, R: float, noise_multiplier, lam: float, noise_norm: float, loss: str,
                  kappa: float) -> float:
    """The ridge a party uses: the smallest λ ≥ max(lam, floor·R²) (floor 1e-10; 1e-5 for Huber) with ``zΔ(λ)√(d+1) ≤ noise_norm`` (Δ falls as λ
    grows), from public quantities only; ``lam`` for a non-private fit."""
    if noise_multiplier is None or not math.isfinite(noise_multiplier) or noise_multiplier <= 0:
        return float(lam)
    z = float(noise_multiplier)
    lo = max(float(lam), (HUBER_LAMBDA_FLOOR if loss == "huber" else LAMBDA_FLOOR) * R * R)

    def ok(v):
        return z * sensitivity(n, R, v, loss, kappa) * math.sqrt(d + 1) <= noise_norm

    if ok(lo):
        return lo
    hi = lo
    while not ok(hi):
        hi *= 2.0
        if hi > 1e300:  # pragma: no cover - refused by public_range_ok before a release
            return math.inf
    for _ in range(100):
        mid = math.sqrt(lo * hi) if lo > 0 else 0.5 * hi
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
        if hi <= lo * (1 + 1e-9):
            break
    return hi


def _loss(loss: str, kappa: float):
    return HuberLoss(kappa) if loss == "huber" else SquaredLoss()


def fit_regression_expert(D, labels, *, R: float, lam: float, noise_multiplier, rng: np.random.Generator,
                          party: str = "party2", noise_norm: float = 0.1, loss: str = "squared",
                          kappa: float = HUBER_KAPPA):
    """Step 2 of the module docstring: ``(coef, info, events)`` as :func:`.model.fit_expert` returns them. ``labels``
    are clipped to [−1, 1] and the rows to norm R here, whatever the caller sends."""
    loss, kappa = check_loss(loss, kappa)
    y = np.asarray(labels, dtype=np.float64)
    if y.shape != (D.shape[0],) or not np.all(np.isfinite(y)):
        raise ValueError(f"party {party!r}: the labels it is sent must be one finite number per row; nothing released")
    y = np.clip(y, -1.0, 1.0)  # the premise |y'| ≤ 1 of the proof, enforced by the party
    D = clip_rows(D, R)
    n, d = D.shape
    private = noise_multiplier is not None
    lam_used = expert_lambda(n, d, R, noise_multiplier, lam, noise_norm, loss, kappa) if private else float(lam)
    Delta = sensitivity(n, R, lam_used, loss, kappa)
    if private and not scale_ok(n, R, lam_used, Delta, noise_multiplier, loss, kappa):
        raise PrivacyPreconditionError(
            f"party {party!r}: R = {R:g}, the ridge {lam_used:g} or the sensitivity {Delta:g} is outside the float range "
            f"the proof holds in (R in [{R_RANGE[0]:g}, {R_RANGE[1]:g}], λ finite > 0, Δ, σ and the solver's tolerance "
            "finite ≥ 1e-280); nothing released; pass a row clip, λ, κ and noise norm of ordinary size")
    gtol = tolerance(n, R, lam_used, loss, kappa)
    A = augment(D, R)
    try:
        w = _solve(A, y, lam_used, gtol, loss=_loss(loss, kappa))
    except Exception:  # Newton stopped short or its system failed
        if not (private and loss == "huber"):
            raise RuntimeError("the expert's solver failed; its sensitivity bound would not hold, so nothing is "
                               "released") from None
        w = solve_huber_fallback(A, y, R, lam_used, kappa, gtol)  # reaches γ by a theorem: no refusal
    info = {"lam": lam_used, "sensitivity": Delta, "sigma": 0.0, "rows": n, "columns": d}
    if not private:
        return w, info, []
    sigma = float(noise_multiplier) * Delta
    info["sigma"] = sigma
    return w + gaussian(rng, sigma, w.shape[0]), info, [GaussianRelease(party, 0, Delta, sigma, RECORD_REPLACE)]


def fallback_steps(n: int, R: float, lam: float, kappa: float, gtol: float) -> int:
    """T, the public step count of the accelerated gradient fallback (module docstring, "Enforced by"): after T
    steps from 0, ‖∇F‖ ≤ gtol/2 in exact arithmetic. Public inputs only (n through gtol)."""
    beta = 2.0 * R * R * (1.0 + _BETA_MARGIN) + lam
    q = beta / lam
    G0 = math.sqrt(2.0) * R * min(kappa, 1.0)
    return 1 + math.ceil(2.0 * math.sqrt(q) * math.log(max(2.0 * math.sqrt(q * (q + 1.0)) * G0 / gtol, 1.0)))


def solve_huber_fallback(A, y, R: float, lam: float, kappa: float, gtol: float) -> np.ndarray:
    """Nesterov's accelerated gradient method (strongly convex form) on the Huber objective F from 0, for
    :func:`fallback_steps` steps: its output has ‖∇F‖ ≤ gtol by the theorem of the module docstring. The final
    comparison is an internal assertion (a failure is a bug, raised as :class:`AssertionError`)."""
    n = A.shape[0]
    AT = A.T.tocsr() if sp.issparse(A) else A.T
    loss = HuberLoss(kappa)

    def grad(w):
        return np.asarray(AT @ (loss.grad(A @ w, y) / n)).ravel() + lam * w

    beta = 2.0 * R * R * (1.0 + _BETA_MARGIN) + lam
    sq = math.sqrt(beta / lam)
    mom = (sq - 1.0) / (sq + 1.0)
    x = y_prev = np.zeros(A.shape[1])
    for _ in range(fallback_steps(n, R, lam, kappa, gtol)):
        y_next = x - grad(x) / beta
        x, y_prev = y_next + mom * (y_next - y_prev), y_next
    if not float(np.linalg.norm(grad(y_prev))) <= gtol:  # excluded by the theorem: a bug, not a refusal
        raise AssertionError("internal error: the Huber expert's accelerated gradient fallback missed the bound its "
                             "step count guarantees; please report this")
    return y_prev


def expert_prediction(coef: np.ndarray, D, R: float) -> np.ndarray:
    """A party's prediction (scaled label units) on rows ``D``, clipped as in training: post-processing of its
    release."""
    return np.asarray(augment(clip_rows(D, R), R) @ coef).ravel()
