"""Pooled statistics of distributed functional quantile regression, released privately [Zhou; SPEC §3].

Before FDP-ADMM runs, the central machine needs a basis, the mean curve for centring, the scores'
scales and the response's location and scale — every one of them a function of *all* workers' data
(the paper is silent on how to obtain them). Each is released here through an accounted Gaussian
mechanism by the worker that holds the data, with noise from the worker's own generator; the hub
only sums what it receives (post-processing). Non-private fits run the same protocol with no noise.

Stages (one engine round each; the hub decides which are needed):

1. ``ranges`` (private fits without a public range): worker i releases two histograms of
   data-independent bins, ``h_y`` over ``asinh(y_ij)`` (width 0.1 on [−30, 30], out-of-range values
   in the end bins; asinh is a signed log, so the bins suit any unit) and ``h_x`` over ``log ‖x̃_ij‖``
   (width ≈ 0.5 on [log 1e−12, log 1e12]), plus N(0, σ² I) on every bin. The bins are coarse on purpose:
   a bin must hold enough curves to stand out of the noise, and stage 2 refines the response's scale.
   Sensitivity: replacing one (curve, response) pair moves one count of each histogram down by 1 and
   one up by 1 — four entries by 1 — so Δ₂ = 2 (√2 when only one histogram is released). Enforced by
   construction (counts of fixed bins; every value lands in exactly one bin).
   The hub keeps the bins whose pooled noisy count exceeds ``THRESHOLD``·σ·√M (a false bin survives
   with probability < 1e−5 each), and reads off a response range [lo, hi] (the 1st and 99th percentile
   bin edges; a coarse range, refined in stage 2) and a curve clipping radius c_X (the 95th percentile
   bin's upper edge). Too few curves for any bin to survive raises
   :class:`~dpadmm.exceptions.PrivacyPreconditionError` naming the public alternatives.
2. ``mean`` (private fits): worker i clips its (projected) curves z_j = clip(Uᵀ x̃_j, c_X) (U: identity
   for FPCA on the grid, the orthonormal basis Q^{1/2}Φ for a fixed basis, so ‖z_j‖ ≤ ‖x̃_j‖) and its
   responses v_j = (clip(y_j, lo, hi) − c)/r (c, r the range's centre and half-width, |v_j| ≤ 1), and
   releases ``(Σ_j z_j/c_X, Σ_j v_j, Σ_j v_j², Σ_j ‖z_j‖²/c_X²)`` + N(0, σ² I). One replaced pair moves
   the four parts by at most 2, 2, 1, 1: Δ₂ = √10 (enforced by the two clips). The hub gets the mean
   μ̂ of z, the response's location a and scale b (mean and standard deviation of the clipped
   response, the latter floored at r/20) and the spread s² = E‖z‖² − ‖μ̂‖² of the curves about
   their mean, and sets the centred radius c₂ = 3s.
3. ``moments``: worker i releases the moment sum of its centred, clipped curves
   ``S_i = Σ_j (c₂, u_j)(c₂, u_j)ᵀ``, ``u_j = clip(z_j − μ̂, c₂)``, plus a symmetric Gaussian matrix
   (i.i.d. upper triangle: the release is the upper triangle, diagonal included). Replacing one u by u'
   moves it by triu(D), ``D = [[0, c₂(u − u')ᵀ], [c₂(u − u'), M]]``, ``M = uuᵀ − u'u'ᵀ``, so
   ``‖triu(D)‖² = c₂²‖u − u'‖² + ‖triu(M)‖²`` and ``‖triu(M)‖² = Σ_i M_ii² + Σ_{i<j} M_ij² ≤ ‖M‖_F²``.
   With a = ‖u‖², b = ‖u'‖² ≤ c₂² (the clip) and p = uᵀu': ``‖u − u'‖² = a + b − 2p`` and
   ``‖M‖_F² = a² + b² − 2p²``, so ``‖triu(D)‖² ≤ 2c₂⁴ + 2c₂⁴ + max_p(−2c₂²p − 2p²) = 4c₂⁴ + c₂⁴/2``
   (the maximum at p = −c₂²/2): Δ₂ = (3/√2)c₂² ≈ 2.12c₂² (:func:`moment_release_sensitivity`),
   scale-free (curves far from zero no longer inflate it: their level went into stage 2, at sensitivity
   2 c_X). The bound is attained: ‖u‖ = ‖u'‖ = c₂ at 120° with M diagonal in the coordinates (u at
   −15°, u' at 105° in two of them), which the audit's worst-case game plays. (Until 2026-11 the code
   priced 4c₂², the Frobenius norm ‖(c₂, u)‖² + ‖(c₂, u')‖² of the two rank-one terms: safe, 1.9× loose.)
   Premises enforced in :func:`stats_step`: ``clip_rows`` (‖u_j‖ ≤ c₂), the first coordinate set to c₂
   for every row (not data), replace-one (m_i public and unchanged).
   The hub reads the residual mean and the covariance of the centred curves → FPCA basis or the fixed
   basis' score scales, and the mean curve μ̂ + residual mean.
   Non-private fits run stage 3 alone on the raw curves (exact sums, plus the response sums n, Σy, Σy²).
4. ``quantile`` (private fits; ``QUANTILE_STEPS`` rounds between stages 2 and 3): a DP τ-quantile of the
   response by noisy bisection over the response range [lo, hi]. Round b asks for the count of responses
   ≤ t_b (the midpoint of the current interval); worker i releases ``#{j: y_ij ≤ t_b} + N(0, σ_q²)``.
   Replacing one pair moves a count by at most 1: Δ₂ = 1 per round (enforced: a count of indicators).
   The hub compares the pooled noisy count with τ·n (n public) and halves the interval; after B rounds
   q̂ = its midpoint (post-processing). This is the fallback model (the DP constant) and the response's
   location in the ADMM (so w = 0, the ADMM's start, *is* the DP constant). B rounds at σ_q = z_q compose
   like one Gaussian release at z_q/√B.
5. ``compare`` (private fits, a separate engine run after the ADMM): the hub sends the released model
   (basis, score scales, clip, standardised coefficients, the DP constant q̂, a prediction band
   [lo', hi'] ∋ q̂ inside the response range, a unit b > 0, τ); worker i releases ``Σ_j d_j + N(0, σ_c²)``
   with ``d_j = (ρ_τ(y_j − p_j) − ρ_τ(y_j − p₀))/b``, p_j = clip(f(x_j), lo', hi'), p₀ = clip(q̂, lo', hi').
   ρ_τ is κ-Lipschitz (κ = max(τ, 1 − τ)), so |d_j| ≤ κ|p_j − p₀|/b ≤ κ·max(hi' − p₀, p₀ − lo')/b =: Δ/2
   whatever y_j is, and replacing one pair moves the sum by at most Δ (enforced by the clip; the worker
   computes Δ from the model it received, :func:`compare_sensitivity`). The estimator hands over the
   model if the pooled noisy sum is clearly < 0 (its clipped training pinball loss is below the DP
   constant's), else the DP constant — post-processing of released values.

With too few curves for the budget (decided from public n and ε by the estimator), ``constant_only`` runs
(``ranges`` for the response if no public range, then) ``quantile`` alone, with the whole budget.

Each stage's noise multiplier is the worker's own (``StatsConfig``): the estimator gives the one-shot
releases a larger share of the budget than one ADMM round (``noise_multiplier``, ``quantile_multiplier``,
``compare_multiplier``), all composed exactly by the accountant from the events emitted here.

Composition: one replaced pair of worker i changes only worker i's releases; everything every other
worker computes afterwards (its scores, its ADMM messages) depends on worker i's data only through
the hub's sums of *noisy* releases, i.e. by post-processing. So worker i's guarantee composes its own
releases here with its own L ADMM releases (the engine's ledger holds both; ``algorithms.functional.report`` composes
per worker and reports the worst), and the run's ε is that worker's.

| symbol | code |
|--------|------|
| x̃_ij = Q^{1/2} x_ij | ``fpca.scale_curves`` |
| c_X | ``StatsRequest.curve_clip`` |
| U | ``StatsRequest.projection`` (None: identity) |
| z = σ/Δ | ``StatsConfig.noise_multiplier`` |
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from ...exceptions import PrivacyPreconditionError
from ...kernels import fpca as F
from ...kernels.quantile import check_loss
from ...privacy.events import RECORD_REPLACE, GaussianRelease
from ...privacy.policy import PolicyRefusal

Y_EDGES = np.linspace(-30.0, 30.0, 61)  # asinh(y) bins of width 1 (|y| up to ~5e12): coarse, so few curves suffice
X_EDGES = np.linspace(math.log(1e-12), math.log(1e12), 111)  # log ||x~|| bins of width ~0.5
THRESHOLD = 4.5  # pooled noisy count must exceed THRESHOLD · sigma · sqrt(M) to count as occupied
Y_QUANTILES = (0.01, 0.99)
QUANTILE_STEPS = 8  # bisection rounds of the DP τ-quantile (resolution (hi − lo)/256)
ONE_SHOT_STAGES = 3  # ranges, mean, moments: each released at most once per run, at ``noise_multiplier``
X_QUANTILE = 0.95


@dataclass(frozen=True, eq=False)
class StatsConfig:
    """What a worker holds for the statistics stages (its curves and responses never leave it)."""

    name: str
    X: np.ndarray  # (m, T) curves on the grid
    y: np.ndarray  # (m,)
    q: np.ndarray  # (T,) quadrature weights
    noise_multiplier: float = 0.0  # z = sigma / sensitivity; 0: exact (non-private)
    quantile_multiplier: float = 0.0  # z_q of each bisection count (stage ``quantile``)
    compare_multiplier: float = 0.0  # z_c of the model-vs-constant comparison (stage ``compare``)
    min_clip: float = 0.0  # the party's floor on every curve clip (its policy's min_clip, imposed at Setup)
    one_shot: int = 3  # one-shot stages (ranges?, mean, moments) the run declares at z (priced; ≤ ONE_SHOT_STAGES)


class StatsRequest(NamedTuple):
    """Hub → workers: which statistic to release, with its public parameters."""

    stage: str  # "ranges" | "mean" | "moments" | "done"
    y_hist: bool = True
    x_hist: bool = True
    curve_clip: float | None = None
    projection: np.ndarray | None = None  # (T, J) with orthonormal columns, or None
    y_range: tuple[float, float] | None = None  # coarse public range for the clipped response sums
    center: np.ndarray | None = None  # μ̂ (projected/scaled space), subtracted before the moment sum
    threshold: float | None = None  # t_b of a bisection round (stage ``quantile``)
    model: dict | None = None  # the released model and DP constant (stage ``compare``)


class StatsMessage(NamedTuple):
    """Workers → hub: the (noisy) statistic of the requested stage."""

    stage: str
    values: dict


class StatsSetup(NamedTuple):
    """``setup_stats``'s arguments by name (the Setup message carries them by name)."""

    name: str
    X: Any  # the worker's curves: a PartyData reference to its own file, or an array in a simulation
    y: Any  # its responses (likewise)
    q: Any  # (T,) quadrature weights of the public grid
    noise_multiplier: float
    quantile_multiplier: float = 0.0
    compare_multiplier: float = 0.0
    min_clip: float = 0.0  # the party's own floor: its policy imposes it at Setup (policy._stats_prepare)
    one_shot: int = ONE_SHOT_STAGES


def setup_stats(name: str, X, y, q, noise_multiplier: float, quantile_multiplier: float = 0.0,
                compare_multiplier: float = 0.0, min_clip: float = 0.0, one_shot: int = ONE_SHOT_STAGES):
    """Worker-side setup (``PartySpec.setup``); ``min_clip``: the party's own floor (imposed by its policy);
    ``one_shot``: how many one-shot stages (``ranges``, ``mean``, ``moments``) the run declares — used only
    to price the run at a party with a budget (a party's ledger refuses a release beyond what it priced)."""
    k = one_shot
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)) or not 0 <= int(k) <= ONE_SHOT_STAGES:
        raise ValueError(f"one_shot = {one_shot!r}: the number of one-shot stages must be an integer in "
                         f"[0, {ONE_SHOT_STAGES}] (ranges, mean, moments)")
    return StatsConfig(name, np.asarray(X, float), np.asarray(y, float), np.asarray(q, float),
                       float(noise_multiplier), float(quantile_multiplier), float(compare_multiplier),
                       float(min_clip), int(k)), None


def moment_release_sensitivity(c2: float) -> float:
    """ℓ2 sensitivity of the ``moments`` release (upper triangle of Σ_j (c₂, u_j)(c₂, u_j)ᵀ, ‖u_j‖ ≤ c₂) under
    replace-one: ``(3/√2) c₂²``, attained (proof in the module docstring, stage 3)."""
    return 3.0 / math.sqrt(2.0) * c2 * c2


def model_predict(model: dict, X: np.ndarray) -> np.ndarray:
    """Predictions of a released model (dict of public arrays, see :func:`stats_step` ``compare``) in the
    response's units, clipped to its band: ``clip(a + b (clip(s(x)/scale, c_1)·w + w_0), band)``."""
    basis = model["basis"]
    A = F.clip_rows(basis.scores(X) / model["score_scale"], model["clip"])
    w = np.asarray(model["w"], float)
    f = A @ w[: A.shape[1]] + (float(w[-1]) if w.size > A.shape[1] else 0.0)
    lo, hi = model["band"]
    return np.clip(model["y_loc"] + model["y_scale"] * f, lo, hi)


def released_model(*, basis, score_scale, clip, w, y_loc: float, y_scale: float, y_range, dp_constant,
                   fit_intercept: bool, tau: float, band: float) -> dict:
    """A fitted model as public arrays (what the ``compare`` stage sends to the workers and :func:`model_predict`
    reads): in a private fit (``dp_constant`` given) predictions stay within ``band`` response scales of it."""
    lo, hi = y_range
    if dp_constant is not None:
        lo, hi = max(lo, dp_constant - band * y_scale), min(hi, dp_constant + band * y_scale)
    return {"basis": basis, "score_scale": np.asarray(score_scale, float), "clip": clip,
            "w": np.asarray(w, float) if fit_intercept else np.r_[np.asarray(w, float), 0.0],
            "y_loc": float(y_loc), "y_scale": float(y_scale), "band": (float(lo), float(hi)),
            "unit": float(y_scale), "tau": float(tau)}


def compare_sensitivity(model: dict) -> float:
    """Δ₂ of Σ_j d_j (see :func:`pinball_difference`): 2κ·max(hi − p₀, p₀ − lo)/unit, from the public model."""
    lo, hi = model["band"]
    p0 = float(np.clip(model["constant"], lo, hi))
    kappa = max(float(model["tau"]), 1.0 - float(model["tau"]))
    return 2.0 * kappa * max(hi - p0, p0 - lo) / float(model["unit"])


def pinball_difference(model: dict, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """d_j = (ρ_τ(y_j − p_j) − ρ_τ(y_j − p₀))/unit with p_j, p₀ clipped to the band: ρ_τ is κ-Lipschitz, so
    |d_j| ≤ κ|p_j − p₀|/unit ≤ κ·max(hi − p₀, p₀ − lo)/unit whatever y_j is."""
    lo, hi = model["band"]
    p = model_predict(model, X)
    p0 = float(np.clip(model["constant"], lo, hi))
    tau = float(model["tau"])
    return (check_loss(y - p, tau) - check_loss(y - p0, tau)) / float(model["unit"])


def _check_request(cfg: StatsConfig, inbox: StatsRequest) -> None:
    """The premises of a private stage's sensitivity that the hub's request carries (REDTEAM_POLICY R5b),
    checked before anything is computed: a finite curve clip ≥ the party's floor (the clip itself is
    underflow-free, ``fpca.clip_rows``), a finite response range with lo < hi (|v_j| ≤ 1), a finite
    projection with orthonormal columns (PᵀP ≈ I: ‖Uᵀx̃‖ ≤ ‖x̃‖, so the ranges stage's radius still applies)
    and a finite centre."""
    bad = []
    cx = inbox.curve_clip
    if not (isinstance(cx, (int, float, np.number)) and math.isfinite(float(cx))
            and float(cx) >= max(cfg.min_clip, np.finfo(float).tiny)):
        bad.append(f"curve_clip = {cx!r} (finite, ≥ {max(cfg.min_clip, np.finfo(float).tiny):g})")
    if inbox.stage == "mean":
        yr = inbox.y_range
        if not (yr is not None and len(yr) == 2 and all(math.isfinite(float(v)) for v in yr)
                and float(yr[1]) > float(yr[0]) and math.isfinite(float(yr[1]) - float(yr[0]))):
            bad.append(f"y_range = {yr!r} (finite, lo < hi)")
    P = inbox.projection
    if P is not None:
        P = np.asarray(P, dtype=float)
        if not (P.ndim == 2 and P.shape[0] == cfg.X.shape[1] and np.all(np.isfinite(P))
                and np.allclose(P.T @ P, np.eye(P.shape[1]), rtol=0.0, atol=1e-6)):
            bad.append("projection (finite, (T, J) with orthonormal columns)")
    if inbox.stage == "moments":
        J = cfg.X.shape[1] if P is None else (P.shape[1] if P.ndim == 2 else -1)
        if inbox.center is None or np.shape(inbox.center) != (J,) or not np.all(np.isfinite(inbox.center)):
            # exactly (J,): a (B, 1, 1, J) centre made B noised moment matrices under one event (red team F4)
            bad.append(f"center (finite, shape ({J},), got {np.shape(inbox.center)})")
    if bad:
        raise PolicyRefusal(f"party {cfg.name!r} refused the {inbox.stage!r} stage and released nothing: "
                            + "; ".join(bad), "INVALID_ARGUMENT")


MAX_COMPARE_SENSITIVITY = 1e100  # the largest Δ a private worker accepts: Σ_j d_j and its noise stay finite


def _checked_compare_model(cfg: StatsConfig, model) -> float:
    """Δ from the hub's model, after checks on the model alone (a refusal reads no row): finite arrays of exact shapes,
    τ ∈ (0, 1), lo < hi, a unit > 0, 0 < Δ ≤ :data:`MAX_COMPARE_SENSITIVITY`. With ``d`` one term per curve, clipped
    to ±Δ/2 (NaN ↦ 0) in the stage, |d_j| ≤ Δ/2 whatever the model predicts (red team 2026-11-29, F1–F3)."""
    bad = []
    if not isinstance(model, dict):
        raise PolicyRefusal(f"party {cfg.name!r} refused the 'compare' stage and released nothing: no model",
                            "INVALID_ARGUMENT")

    def finite(*keys):
        for k in keys:
            try:
                ok = bool(np.all(np.isfinite(np.asarray(model.get(k), dtype=float))))
            except (TypeError, ValueError):
                ok = False
            if not ok:
                bad.append(f"{k} (finite)")

    finite("w", "score_scale", "y_loc", "y_scale", "constant", "band", "unit", "tau", *(("clip",) if model.get("clip") is not None else ()))
    # exact shapes (red team F3: a (B, 1) y_loc broadcast each d_j into B copies that the sum counted B times)
    for k in ("y_loc", "y_scale", "constant", "unit", "tau") + (("clip",) if model.get("clip") is not None else ()):
        if np.ndim(model.get(k)) != 0:
            bad.append(f"{k} (a number, got shape {np.shape(model.get(k))})")
    if np.shape(model.get("band")) != (2,):
        bad.append(f"band (two numbers, got shape {np.shape(model.get('band'))})")
    for k in ("w", "score_scale"):
        if np.ndim(model.get(k)) != 1:
            bad.append(f"{k} (a vector, got shape {np.shape(model.get(k))})")
    if not bad:
        lo, hi = (float(v) for v in model["band"])
        if not (hi > lo and math.isfinite(hi - lo)):
            bad.append(f"band = {model['band']!r} (lo < hi)")
        if not 0.0 < float(model["tau"]) < 1.0:
            bad.append(f"tau = {model['tau']!r} (in (0, 1))")
        if not float(model["unit"]) > 0.0:
            bad.append(f"unit = {model['unit']!r} (> 0)")
    if not bad:
        with np.errstate(all="ignore"):
            sens = compare_sensitivity(model)
        if not (math.isfinite(sens) and 0.0 < sens <= MAX_COMPARE_SENSITIVITY):
            bad.append(f"sensitivity {sens!r} (finite, in (0, {MAX_COMPARE_SENSITIVITY:g}])")
    if bad:
        raise PolicyRefusal(f"party {cfg.name!r} refused the 'compare' stage and released nothing: "
                            + "; ".join(bad), "INVALID_ARGUMENT")
    return sens


def _hist(values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    idx = np.clip(np.searchsorted(edges, values, side="right") - 1, 0, edges.size - 2)
    return np.bincount(idx, minlength=edges.size - 1).astype(float)


def _refuse_unnoised(cfg: StatsConfig, multiplier: float, stage: str) -> None:
    """A private worker (noise_multiplier > 0) never releases a stage it holds no noise for."""
    if cfg.noise_multiplier > 0 and not multiplier > 0:
        raise PrivacyPreconditionError(f"{cfg.name}: stage {stage!r} requested but this private worker holds no noise "
                                       "multiplier for it; refused (it would release an un-noised statistic).")


def stats_step(cfg: StatsConfig, state, inbox: StatsRequest, *, rng: np.random.Generator):
    """Release the requested statistic with Gaussian noise of scale z·Δ (see the module docstring)."""
    z = cfg.noise_multiplier
    events = []
    values: dict = {}
    if inbox.stage == "ranges":
        parts = []
        if inbox.y_hist:
            values["y_hist"] = _hist(np.arcsinh(cfg.y), Y_EDGES)
            parts.append("y_hist")
        if inbox.x_hist:
            norms = np.linalg.norm(F.scale_curves(cfg.X, cfg.q), axis=1)
            values["x_hist"] = _hist(np.log(np.maximum(norms, 1e-300)), X_EDGES)
            parts.append("x_hist")
        sens = math.sqrt(2.0 * len(parts))  # each histogram: one count −1, one +1
        if z > 0:
            sigma = z * sens
            for k in parts:
                values[k] = values[k] + sigma * rng.standard_normal(values[k].shape)
            events.append(GaussianRelease(cfg.name, -2, sens, sigma, RECORD_REPLACE))
    elif inbox.stage == "mean":
        _check_request(cfg, inbox)
        Z = F.scale_curves(cfg.X, cfg.q)
        if inbox.projection is not None:
            Z = Z @ inbox.projection
        cx = float(inbox.curve_clip)
        Zc = F.clip_rows(Z, cx)  # ‖z_j‖ ≤ c_X
        lo, hi = inbox.y_range
        c, r = 0.5 * (lo + hi), 0.5 * (hi - lo)
        v = (np.clip(cfg.y, lo, hi) - c) / r  # |v_j| ≤ 1
        vec = np.concatenate([Zc.sum(0) / cx, [v.sum(), (v * v).sum(), (Zc * Zc).sum() / (cx * cx)]])
        if not np.all(np.isfinite(vec)):  # e.g. a curve of non-finite values: nothing is released
            raise PolicyRefusal(f"party {cfg.name!r} refused the 'mean' stage: its sums are not finite (released "
                                "nothing)", "FAILED_PRECONDITION")
        sens = math.sqrt(10.0)
        values["mean"] = vec + z * sens * rng.standard_normal(vec.shape)
        events.append(GaussianRelease(cfg.name, -2, sens, z * sens, RECORD_REPLACE))
    elif inbox.stage == "quantile":
        count = float(np.count_nonzero(cfg.y <= float(inbox.threshold)))  # Δ₂ = 1 (one replaced pair)
        sigma = cfg.quantile_multiplier
        _refuse_unnoised(cfg, sigma, "quantile")
        values["count"] = np.array([count + sigma * float(rng.standard_normal())])
        if sigma > 0:
            events.append(GaussianRelease(cfg.name, -3, 1.0, sigma, RECORD_REPLACE))
    elif inbox.stage == "compare":
        model = inbox.model
        _refuse_unnoised(cfg, cfg.compare_multiplier, "compare")
        sens = _checked_compare_model(cfg, model) if is_private(cfg) else compare_sensitivity(model)
        with np.errstate(all="ignore"):
            d = pinball_difference(model, cfg.X, cfg.y)
        if is_private(cfg):  # |d_j| ≤ sens/2 by construction, whatever the hub's model computes (NaN ↦ 0)
            if np.shape(d) != (cfg.y.shape[0],):  # one term per curve, as priced (the basis's arrays broadcast too)
                raise PolicyRefusal(f"party {cfg.name!r} refused the 'compare' stage and released nothing: the hub's "
                                    f"model gives differences of shape {np.shape(d)}, not one per curve",
                                    "INVALID_ARGUMENT")
            d = np.clip(np.nan_to_num(d, nan=0.0, posinf=sens / 2, neginf=-sens / 2), -sens / 2, sens / 2)
        sigma = cfg.compare_multiplier * sens
        values["difference"] = np.array([float(d.sum()) + sigma * float(rng.standard_normal())])
        if sigma > 0:
            events.append(GaussianRelease(cfg.name, -4, sens, sigma, RECORD_REPLACE))
    elif inbox.stage == "moments":
        Z = F.scale_curves(cfg.X, cfg.q)
        if inbox.projection is not None:
            Z = Z @ inbox.projection
        if z > 0:
            _check_request(cfg, inbox)
            c2 = float(inbox.curve_clip)
            U = F.clip_rows(Z - inbox.center, c2)  # ‖u_j‖ ≤ c₂: the premise of Δ = (3/√2)c₂² (module docstring)
            S = F.moment_sum(U, np.ones(U.shape[1]))
            S[0, :] *= c2  # rows of (c₂, u_j): the first coordinate is c₂ for every row, not data
            S[:, 0] *= c2
            sens = moment_release_sensitivity(c2)
            values["S"] = F.noisy_moment_sum(S, z * sens, rng)
            events.append(GaussianRelease(cfg.name, -1, sens, z * sens, RECORD_REPLACE))
        else:  # non-private: exact sums, response included
            values["S"] = F.moment_sum(Z, np.ones(Z.shape[1]))
            values["y_sums"] = np.array([cfg.y.size, cfg.y.sum(), (cfg.y * cfg.y).sum()])
    return state, StatsMessage(inbox.stage, values), events


def is_private(cfg: StatsConfig) -> bool:
    return cfg.noise_multiplier > 0
