"""The label-private protocol of vertical ADMM sharing (beyond [Hu]): the label party's mechanisms,
its exact refit, and its choice against its own model.

Two label mechanisms (``VerticalLogisticRegression(label_mechanism=...)``):

* ``"rr"`` (default): the label party releases its labels **once** through randomized response
  (:func:`randomized_response`, pure ε-label-DP); the unchanged ADMM of [Hu, eq. 6–8] then runs on the
  released labels ỹ to convergence — every message after the release is post-processing, so the
  rounds are free. The label party then calibrates on its exact labels (:func:`refit_label_block`).
* ``"gaussian"``: the coordinator runs a *linearised* z-step instead of [Hu, eq. 7–8]: from the
  public score ``s = Σ_m ũ_m + b̃`` it sends every party ``g̃ = clip(ℓ'(s, Y)) + N(0, σ_L² I)`` and
  residual 0, so the party's unchanged x-step becomes a Jacobi majorise–minimise step (ρ ≥ M·sup ℓ'');
  each round is a Gaussian release (:func:`label_private_step`), so only a few rounds are affordable.

Measured (benchmarks/private_utility/vertical.py): at label ε = 1 randomized response with the label
party's refit beats the Gaussian protocol on every dataset there, because its rounds cost nothing.

After either run the label party refits its own block, the intercept and a weight α on the others'
shares on its exact labels and keeps that model or its own, whichever cross-validates better on its
own rows (:func:`refit_label_block`): never worse than the label party alone, within the noise of the
choice. That model never leaves the label party.

See :mod:`dpadmm.algorithms.vertical` for the recursion these steps plug into.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from ...privacy.events import LABEL_CHANGE, GaussianRelease, PureDPRelease
from ...privacy.mechanisms import flip_probability

from ...exceptions import ProtocolError
from ...kernels.losses import get_loss
from . import refit
from .messages import (  # noqa: F401  (LabelPrivacy re-exported: its home is .messages)
    CoordinatorConfig, CoordinatorMessage, CoordinatorState, LabelPrivacy, PartyConfig, PartyMessage, PartyState,
)


def label_private_step(cfg: CoordinatorConfig, state: CoordinatorState, outboxes: Mapping[str, PartyMessage], *,
                       rng: np.random.Generator):
    """The label-private coordinator (module docstring): linearised z-step, noisy clipped gradient.

    Relation: one training label changes. Premise (given the transcript, s does not depend on the
    labels): ``total`` is the sum of the parties' released shares and ``state.intercept`` the public
    intercept b̃, itself moved only by earlier noisy sums. ``g_i = clip(ℓ'(s_i, Y_i), −C, C)`` then
    depends on Y_i alone, and so does ``Σ g_i``: the pair has ℓ2 sensitivity
    ``label_sensitivity()`` (√2·W, W = 1 for the logistic loss). Emits one ``GaussianRelease`` of
    party ``"coordinator"`` under the label relation per round.
    """
    lp = cfg.label_privacy
    rho = state.rho
    n = cfg.labels.shape[0]
    total = sum(outboxes[name].share for name in cfg.party_names)
    s = total + state.intercept
    g = np.clip(cfg.loss.grad(s, cfg.labels), -lp.clip, lp.clip)  # clip: premise of the sensitivity
    C = cfg.label_sensitivity()
    sigma = lp.noise_scale if lp.noise_scale is not None else lp.noise_multiplier * C
    t = state.round + 1
    own = outboxes[cfg.party_names[0]].share
    b = state.intercept
    if lp.rounds is not None and t >= lp.rounds:  # last round: nothing would use a release, so none is made
        new_state = CoordinatorState(t, s, g, total, rho, np.inf, np.inf, b, passive_total=total - own)
        return new_state, {name: CoordinatorMessage(t, np.zeros(n), np.zeros(n), rho) for name in cfg.party_names}, []
    g_noisy = g + sigma * rng.standard_normal(n)
    if cfg.fit_intercept:  # majorise–minimise step of the intercept from the noisy sum
        b = b - float(g.sum() + sigma * rng.standard_normal()) / (rho * n)
    new_state = CoordinatorState(t, s, g, total, rho, np.inf, np.inf, b, passive_total=total - own)
    msg = CoordinatorMessage(t, np.zeros(n), g_noisy, rho)  # residual 0: the party's step is the MM step
    return new_state, {name: msg for name in cfg.party_names}, [GaussianRelease("coordinator", t, C, sigma, LABEL_CHANGE)]


def _extra_columns(n: int, fit_intercept: bool, offset) -> np.ndarray:
    """The refit's columns besides the label party's block: the intercept's ones, then the offset o."""
    cols = ([np.ones(n)] if fit_intercept else []) + ([offset] if offset is not None else [])
    return np.column_stack(cols) if cols else np.zeros((n, 0))


#: folds of the label party's cross-validated choice (rows i ≡ k mod FOLDS form fold k: no randomness needed)
FOLDS = 5
#: the joint model must beat the label party's own by this many standard errors of the held-out difference
MARGIN = 2.0


def refit_label_block(cfg: PartyConfig, state: PartyState, offset: np.ndarray, loss: str,
                      fit_intercept: bool, intercept0: float = 0.0, weigh_offset: bool = True,
                      choose: bool = False, lam: float | None = None, block_scale: float = 1.0) -> dict:
    """The label party's exact refit after a private run, and its choice (runs at the label party only).

    Joint model: ``argmin_{x, b, α} Σ_i ℓ(d_iᵀx + b + α o_i, Y_i) + λ_s/2‖x‖²`` with o = the sum of the
    other parties' last shares (as the coordinator received them) and Y the label party's *exact* labels
    (its own data). α (fitted with ``weigh_offset``, the default; else α = 1) calibrates the others'
    contribution on the exact labels: it discounts noisy shares (feature-side DP) and undoes the
    shrinkage of a fit to randomized-response labels, whose scores estimate the logit of
    ``P(Ỹ=1|x) = q + (1 − 2q) P(Y=1|x)`` rather than of P(Y=1|x) (this calibration is the de-biasing for
    the known flip rate q, done on the exact labels instead of by formula; α → 0 recovers the label
    party alone). Without ``weigh_offset`` a badly scaled o enters at weight 1 and the label party
    cannot undo it — on raw-unit features after two label-private rounds that ranked the test set
    backwards, which is why α is always fitted now.

    ``block_scale`` c: the label party's block was multiplied by c in its DP preparation (c = 1/R after
    clipping rows at R, so that ‖d_k‖ ≤ 1); the ridge on its own block is then ``λ·c²``, the same model
    as λ on the unscaled block (a plain λ on the shrunken block would be a ridge R² times stronger than
    the label party's own model on its own data).

    ``choose``: **never worse than the label party alone.** The label party also fits its own model
    (``argmin_{x, b} Σ ℓ(d_iᵀx + b, Y_i) + λ_s/2‖x‖²``) and keeps the joint model only if its
    :data:`FOLDS`-fold cross-validated loss on its own rows is lower by more than :data:`MARGIN` (2)
    standard errors of the per-row held-out difference (else its own model). This costs no privacy: it uses the label
    party's own labels and features and the shares it already holds, and its result — the model, b, α
    and which model won — stays with the label party (passive parties are asked for their test scores
    either way, so the request pattern does not reveal the choice). Predictions the label party
    publishes from that model depend on its exact labels, as any model of its own would.

    Returns the model (``coef``, ``intercept``, ``passive_weight`` α), ``choice`` (``"joint"`` or
    ``"alone"``), the cross-validated losses ``cv`` and the label party's eval-set partial scores.
    """

    if cfg.labels is None:  # a passive party never fits a model of its block to labels someone sends it
        raise ProtocolError(f"party {cfg.name!r} refused 'refit': it holds no labels of its own (only the label "
                            "party refits its block)")
    labels = cfg.labels
    loss = get_loss(loss)  # by name: only plain data crosses to the party
    D = cfg.D
    n, d = D.shape
    lam = cfg.lam_sum / n if lam is None else float(lam)  # λ of the refit (the joint run may have used more)
    offset = np.asarray(offset, dtype=np.float64)
    k_b = 1 if fit_intercept else 0
    joint = refit.Design(D, _extra_columns(n, fit_intercept, offset if weigh_offset else None))
    base = np.zeros(n) if weigh_offset else offset  # the fixed part of every score
    pen = np.r_[np.full(d, lam * float(block_scale) ** 2), np.zeros(joint.k - d)]
    w0 = np.r_[state.x, [intercept0] * k_b, [1.0] if weigh_offset else []]
    w = refit.fit(joint, base, labels, loss, pen, w0)
    out = {"coef": w[:d], "intercept": float(w[d]) if fit_intercept else 0.0,
           "passive_weight": float(w[-1]) if weigh_offset else 1.0, "choice": "joint", "cv": None}
    if choose:
        alone = refit.Design(D, _extra_columns(n, fit_intercept, None))
        pen0, zero = pen[:alone.k], np.zeros(n)
        w_alone = refit.fit(alone, zero, labels, loss, pen0, w0[:alone.k])
        fold = np.arange(n) % FOLDS
        held = []  # per-row held-out loss of the joint model, then of the label party's own
        for design, b, p, w_full in ((joint, base, pen, w), (alone, zero, pen0, w_alone)):
            # every fold starts at the full fit, with its Hessian there (one pass over the rows for all folds)
            H0 = None if design.k > refit.NEWTON_MAX_COLUMNS else refit.fold_hessians(
                design, loss.hess(design.dot(w_full) + b, labels), p, FOLDS)
            W = refit.fit(design, b, labels, loss, p, np.repeat(w_full[:, None], FOLDS, axis=1), folds=FOLDS, H0=H0)
            held.append(loss.value(np.take_along_axis(design.dot(W), fold[:, None], axis=1)[:, 0] + b, labels))
        lj, la = held
        diff = lj - la
        cv = {"joint": sum(float(np.sum(lj[k::FOLDS])) for k in range(FOLDS)) / n,
              "alone": sum(float(np.sum(la[k::FOLDS])) for k in range(FOLDS)) / n,
              "standard_error": float(diff.std(ddof=1) / np.sqrt(n)) if n > 1 else 0.0}
        out["cv"] = cv
        # the joint model must win by more than MARGIN standard errors of the held-out difference: a gain
        # the label party cannot tell from noise is not worth a model that may generalise worse (1 SE let
        # 2 of 12 breast_cancer seeds end 0.001–0.003 above the label party alone; 2 SE none)
        if cv["joint"] + MARGIN * cv["standard_error"] >= cv["alone"]:
            out.update(coef=w_alone[:d], intercept=float(w_alone[d]) if fit_intercept else 0.0, passive_weight=0.0,
                       choice="alone")
    out["eval_scores"] = {k: B @ out["coef"] for k, B in cfg.eval_blocks.items()}
    return out


def randomized_response(labels: np.ndarray, epsilon: float, *, rng: np.random.Generator, party: str = "coordinator"):
    """The label party's one release of its labels: k = 2 randomized response (Warner 1965).

    Each label Y_i ∈ {−1, +1} is kept with probability ``e^ε/(1 + e^ε)`` and flipped with probability
    ``q = 1/(1 + e^ε)``, independently, from ``rng`` (the label party's own entropy unless a seed was
    asked for).

    Relation: one training label changes (features equal). Proof of pure ε-label-DP: the flips are
    independent, so for neighbours Y, Y' differing in label i only, every output ỹ has
    ``P(ỹ|Y)/P(ỹ|Y') = P(ỹ_i|Y_i)/P(ỹ_i|Y'_i) ∈ {e^ε, e^−ε}`` (the ratio of keep to flip). No premise
    needs enforcing beyond the labels being two-valued, which :func:`dpadmm._validation.binary_labels`
    checks at the estimator. Everything computed from ỹ afterwards — every message of the ADMM run on
    ỹ — is post-processing and costs nothing more; the run's label ε is this ε (δ = 0).
    Emits one ``PureDPRelease`` of ``party`` (default ``"coordinator"``, the label party's organisation here; the
    encrypted protocol's label party books it as ``"party1"``) under the label relation. Returns ``(ỹ, [event])``.
    """
    y = np.asarray(labels, dtype=np.float64)
    q = flip_probability(epsilon)
    flip = rng.random(y.shape[0]) < q
    return np.where(flip, -y, y), [PureDPRelease(party, 0, float(epsilon), LABEL_CHANGE)]
