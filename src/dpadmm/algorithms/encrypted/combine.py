"""The label party's final model after an encrypted fit (``forward="encrypted"``): the other parties' part of the
joint model stacked with the label party's OWN model, chosen on its held-out rows. Post-processing at the label
party: no ε on either side, nothing sent.

What limits the joint model alone. Its score ``s₀ + Σ_m s_m`` is learned on the Taylor loss (FATE's ½ + s/4 − y), in
T noisy rounds, with ‖w‖ ≤ W; its label party's weights w₀ move only on label-noised gradients (they must: w₀ sets
every residual party m's gradient is computed from, so w₀ has to be post-processing of the label-DP releases).
Without any noise its Platt-scaled score reaches 0.3393 on a9a (with ε = 1 each side 0.3416): the model, not the
noise, is the limit. The label party's own logistic model on its own standardised columns, exact labels, is held
back by none of this (0.3500 alone). The other parties' scores ``Σ_m s_m``, however, were learned jointly: what party
m's columns add given the label party's. Stacked, on a9a at ε = 1 each side: 0.3282 (3 seeds, W = 4; the experts
protocol 0.3343 in the same run; BENCHMARKS.md, "The encrypted vertical protocol"); with today's defaults 0.3289.

So at the end the label party does what it may do with its own data (as in the experts protocol,
:mod:`dpadmm.algorithms.experts.calibrate`): on its held-out rows — excluded from the joint fit; their labels are
never used in a release — it has its own model's logit (fitted on its training rows only), every party's logit
(those rows are new records for the parties: post-processing of their DP weights, as for the Platt scaling), and
the labels; it fits ``logit = c + a·own + b·Σ_m s_m`` and keeps it, or its own model, by
:func:`dpadmm.algorithms.experts.calibrate.choose` (5-fold cross-validation on the held-out rows, the stacked fit
kept only if better by more than two standard errors: never worse than the label party alone beyond that noise).

Why no warm start instead. Starting w₀ from the label party's own model (exact labels) would look free — its data
never leaves it — but it is not: w₀(0) then depends on every label, and so does every residual of every round, so
one label changed moves party m's gradient ``D̂_mᵀg`` through all n rows, not by the one residual ``Δ_L`` bounds.
The label side's theorem (Δ_L, one residual moves by 1 given the past releases) would no longer hold. The own model
enters only here, after the last release, where nothing reaches another party.

Privacy. Label side: party m saw only its label-noised gradients during the fit; nothing computed here is sent
(the own model and the combination stay with the label party, as in the experts protocol; predictions the label
party publishes from them are not covered on the label side, nor are the experts'). Feature side: unchanged — the
held-out rows' logits are new records, as before.

The default since 2026-11-27 (``combine="weighted"``): the same two-standard-error test, against a better null
model. The stacked fit has three free parameters (c, a, b) learned on the held-out rows — a few hundred on a table
of a few thousand — and the test asks its gain over the label party's own model to show on those same rows: on
``fair`` (446 held-out rows) the margin was larger than the gain, so the label party kept its own model on every
seed, even without noise. But its own model is already fitted and calibrated on its training rows; what it does
not know is how much to trust the other parties' score. So the null model is ``own + b·(Σ_m s_m − μ)``: ONE number
b fitted on the held-out rows (μ the score's held-out mean, no label used), by maximum likelihood under b ≥ 0
(Breiman's non-negative stacking, 1996: a score learned jointly to predict the label should not count against it;
b = 0 is exactly the label party alone — about one parameter's worth of overfitting, 1/(2·446) ≈ 0.001 in log loss
on ``fair``, against the stacked fit's three). The stacked fit replaces it only if better by two standard errors in
5-fold cross-validation there (on a9a's 3,256 held-out rows it was on two seeds of three; on a few hundred it
seldom is). ``fair`` at ε = 1 each side, seeds 0-2: 0.5468, 0.5495, 0.5417 (mean 0.5460; the label party alone
0.5488, which the old default returned on every seed).

How it was chosen: on three tables whose columns overlap across parties, neither ``fair`` nor a9a
(``benchmarks/bench_encrypted_tables.py``: doctorvisits, nmes, benefits), plaintext-layer fits at ε ∈ {0.5, 1, 3}
each side, against ``"choose"`` (which tied the label party alone on almost every fit), the stacked fit always,
the weight with a free intercept, a James–Stein-shrunk weight, and AIC between the models (BENCHMARKS.md, "The
encrypted vertical protocol": the tables and every rule's figures). ``fair`` and a9a were run only after.

Modes (``VerticalEncryptedClassifier(combine=...)``): ``"weighted"`` (default: the one non-negative weight above, or
the stacked fit if better by two standard errors), ``"choose"`` (the stacked fit or the own model by that rule,
the default before), ``"stacked"``
(the stacked fit whatever the held-out comparison says), ``"joint"`` (the joint score Platt-scaled, as before this
module).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..experts import calibrate as xc
from ..experts.alone import fit_label_party_alone, standardise
from ..experts.model import augment

COMBINE_MODES = ("weighted", "choose", "stacked", "joint")
#: the default final model (module docstring)
DEFAULT_COMBINE = "weighted"
#: the ridge of the label party's own model: the experts protocol's default and the "label party alone" baseline's
#: (:data:`dpadmm.workflows.vertical.BASELINE_LAM`), a fixed default (not tuned)
OWN_LAM = 1e-3


class OwnModel(NamedTuple):
    coef: np.ndarray  # [w, b] on its standardised columns
    scaling: tuple | None  # its column statistics (never sent)

    def logit(self, X) -> np.ndarray:
        return np.asarray(augment(standardise(X, self.scaling), 1.0) @ self.coef).ravel()


def own_model(X, y_pm) -> OwnModel:
    """The label party's own model on its own columns (:func:`dpadmm.algorithms.experts.alone.fit_label_party_alone`)."""
    return OwnModel(*fit_label_party_alone(X, y_pm, OWN_LAM))


def choose(mode: str, own_heldout, others_heldout, y_heldout, rng: np.random.Generator) -> xc.Choice | None:
    """The label party's choice on its held-out rows (module docstring), at every size (issue 38: the choice was
    skipped below 200 held-out rows, and on a 923-row table the joint model was then worse than the label party
    alone): ``own_heldout`` its own model's logit (fitted without them), ``others_heldout`` Σ_m s_m, ``y_heldout``
    ±1. ``None``: the joint model (mode ``"joint"``). Fewer held-out rows than the folds need (2·FOLDS): its own
    model, without a comparison (:func:`dpadmm.algorithms.experts.calibrate.own_model_choice`, as experts do)."""
    if mode not in COMBINE_MODES:
        raise ValueError(f"combine must be one of {COMBINE_MODES}, got {mode!r}")
    y = np.asarray(y_heldout, dtype=np.float64)
    if mode == "joint":
        return None
    if len(y) < 2 * xc.FOLDS and mode != "stacked":
        return xc.own_model_choice(1, len(y))
    if mode == "weighted":
        return weighted(own_heldout, others_heldout, y, rng)
    c = xc.choose(own_heldout, others_heldout, y, rng)
    if mode == "stacked" and c.kind != "stacked":
        w = xc.fit_stack(np.column_stack([own_heldout, others_heldout]), y)  # the fit 'choose' keeps when it stacks
        c = c._replace(kind="stacked", weights=(float(w[0]), float(w[1]), float(w[2])))
    return c


def nonnegative_weight(own, centred, y, iterations: int = 100) -> float:
    """argmax_{b ≥ 0} Σ_i log σ(y_i (own_i + b·centred_i)): the log-likelihood is concave in b, so the constrained
    maximum is the unconstrained one (Newton from 0) when that is positive, else 0."""
    own, centred, y = (np.asarray(v, dtype=np.float64) for v in (own, centred, y))
    if not np.any(centred):
        return 0.0
    b = 0.0
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-np.clip(y * (own + b * centred), -50, 50)))  # P(the observed label)
        grad = float(np.sum(y * (1.0 - p) * centred))
        hess = float(np.sum(p * (1.0 - p) * centred * centred))
        if hess <= 0.0:
            break
        step = grad / hess
        b += step
        if abs(step) < 1e-12 * max(1.0, abs(b)):
            break
    return max(b, 0.0) if np.isfinite(b) else 0.0


def weight_fit(own, others, y) -> tuple[float, float]:
    """``(c, b)`` of the weighted model ``own + c + b·others`` = ``own + b·(others − μ)``: μ the mean of ``others``
    on these rows, b ≥ 0 by :func:`nonnegative_weight`."""
    others = np.asarray(others, dtype=np.float64)
    mu = float(np.mean(others))
    b = nonnegative_weight(own, others - mu, y)
    return -b * mu, b


def weighted(own_heldout, others_heldout, y_heldout, rng: np.random.Generator) -> xc.Choice:
    """``combine="weighted"`` (module docstring) on the held-out rows: ``own + b·(Σ_m s_m − μ)``, b ≥ 0 — or the
    stacked fit ``c + a·own + b·Σ_m s_m`` when its 5-fold cross-validated log loss there is lower by more than two
    standard errors of the paired difference (:func:`dpadmm.algorithms.experts.calibrate.choose`'s test, the null
    model changed). A :class:`~dpadmm.algorithms.experts.calibrate.Choice`: kind ``"weighted"`` (weights
    ``(−b·μ, 1, b)``), ``"own model"`` (b = 0: (0, 1, 0)) or ``"stacked"``; ``loss_own`` is the weighted model's
    cross-validated held-out log loss (the null model's), ``loss_stacked`` the stacked fit's, ``tolerance`` the
    margin."""
    own, others, y = (np.asarray(v, dtype=np.float64) for v in (own_heldout, others_heldout, y_heldout))
    n = len(y)
    F = np.column_stack([own, others])
    folds = rng.permutation(n) % xc.FOLDS
    stacked, null = np.empty(n), np.empty(n)
    for k in range(xc.FOLDS):
        fit, out = folds != k, folds == k
        w = xc.fit_stack(F[fit], y[fit])
        stacked[out] = w[0] + F[out] @ w[1:]
        c, b = weight_fit(own[fit], others[fit], y[fit])
        null[out] = own[out] + c + b * others[out]
    l_null, l_st = np.logaddexp(0.0, -y * null), np.logaddexp(0.0, -y * stacked)
    d = l_st - l_null
    tol = max(2.0 * float(d.std(ddof=1)) / math.sqrt(n), 1e-6 * float(l_null.mean()))
    # the safety net: whatever wins, it must also beat the label party alone (its own model, fitted without these
    # rows: nothing fitted here) in the same cross-validation, or the label party keeps its own model
    l_own = float(np.mean(np.logaddexp(0.0, -y * own)))
    if min(float(l_null.mean()), float(l_st.mean())) >= l_own:
        return xc.Choice("own model", (0.0, 1.0, 0.0), n, float(l_null.mean()), float(l_st.mean()), tol)
    if float(d.mean()) < -tol and float(l_st.mean()) < l_own:
        w = xc.fit_stack(F, y)
        return xc.Choice("stacked", (float(w[0]), float(w[1]), float(w[2])), n, float(l_null.mean()),
                         float(l_st.mean()), tol)
    c, b = weight_fit(own, others, y)
    if b == 0.0 or float(l_null.mean()) >= l_own:
        return xc.Choice("own model", (0.0, 1.0, 0.0), n, float(l_null.mean()), float(l_st.mean()), tol)
    return xc.Choice("weighted", (float(c), 1.0, float(b)), n, float(l_null.mean()), float(l_st.mean()), tol)


__all__ = ["COMBINE_MODES", "DEFAULT_COMBINE", "OWN_LAM", "OwnModel", "choose", "nonnegative_weight", "own_model", "weight_fit", "weighted"]
