"""The label party's final model after an encrypted fit (``forward="encrypted"``): the other parties' part of the
joint model stacked with the label party's OWN model, chosen on its held-out rows. Post-processing at the label
party: no ε on either side, nothing sent.

What limits the joint model alone. Its score ``s₀ + Σ_m s_m`` is learned on the Taylor loss (FATE's ½ + s/4 − y), in
T noisy rounds, with ‖w‖ ≤ W; its label party's weights w₀ move only on label-noised gradients (they must: w₀ sets
every residual party m's gradient is computed from, so w₀ has to be post-processing of the label-DP releases).
Without any noise its Platt-scaled score reaches 0.3393 on a9a (with ε = 1 each side 0.3416): the model, not the
noise, is the limit. The label party's own logistic model on its own standardised columns, exact labels, is held
back by none of this (0.3500 alone). The other parties' scores ``Σ_m s_m``, however, were learned jointly: what party
m's columns add given the label party's. Stacked, on a9a at ε = 1 each side: 0.3282 (3 seeds; the experts protocol
0.3343 in the same run; BENCHMARKS.md, "The encrypted vertical protocol").

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

Modes (``VerticalEncryptedClassifier(combine=...)``): ``"choose"`` (default: the rule above), ``"stacked"`` (the
stacked fit whatever the held-out comparison says), ``"joint"`` (the joint score Platt-scaled, as before this module).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..experts import calibrate as xc
from ..experts.alone import fit_label_party_alone, standardise
from ..experts.model import augment

COMBINE_MODES = ("choose", "stacked", "joint")
#: the ridge of the label party's own model: the experts protocol's default and the "label party alone" baseline's
#: (:data:`dpadmm.experiments.vertical.BASELINE_LAM`), a fixed default (not tuned)
OWN_LAM = 1e-3
#: fewer held-out rows than this: no stacking (the joint model Platt-scaled, as with ``"joint"``)
MIN_HELDOUT = xc.MIN_HELDOUT


class OwnModel(NamedTuple):
    coef: np.ndarray  # [w, b] on its standardised columns
    scaling: tuple | None  # its column statistics (never sent)

    def logit(self, X) -> np.ndarray:
        return np.asarray(augment(standardise(X, self.scaling), 1.0) @ self.coef).ravel()


def own_model(X, y_pm) -> OwnModel:
    """The label party's own model on its own columns (:func:`dpadmm.algorithms.experts.alone.fit_label_party_alone`)."""
    return OwnModel(*fit_label_party_alone(X, y_pm, OWN_LAM))


def choose(mode: str, own_heldout, others_heldout, y_heldout, rng: np.random.Generator) -> xc.Choice | None:
    """The label party's choice on its held-out rows (module docstring): ``own_heldout`` its own model's logit
    (fitted without them), ``others_heldout`` Σ_m s_m, ``y_heldout`` ±1. ``None``: the joint model (mode
    ``"joint"``, or fewer than :data:`MIN_HELDOUT` rows)."""
    if mode not in COMBINE_MODES:
        raise ValueError(f"combine must be one of {COMBINE_MODES}, got {mode!r}")
    y = np.asarray(y_heldout, dtype=np.float64)
    if mode == "joint" or len(y) < MIN_HELDOUT:
        return None
    c = xc.choose(own_heldout, others_heldout, y, rng)
    if mode == "stacked" and c.kind != "stacked":
        w = xc.fit_stack(np.column_stack([own_heldout, others_heldout]), y)  # the fit 'choose' keeps when it stacks
        c = c._replace(kind="stacked", weights=(float(w[0]), float(w[1]), float(w[2])))
    return c


__all__ = ["COMBINE_MODES", "MIN_HELDOUT", "OWN_LAM", "OwnModel", "choose", "own_model"]
