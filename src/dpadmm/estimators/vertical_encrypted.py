"""Vertical logistic regression learned jointly under encryption (protocol ``vertical-encrypted``).

The protocol, its threat model (the forward pass's per-row scores are NOT protected) and its proofs are in
:mod:`dpadmm.algorithms.encrypted.protocol`. This estimator runs the parties in the caller's process (a
simulation: the driver holds every block, and collects each party's weights to score new records).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import ClassVar

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import NotFittedError
from sklearn.metrics import log_loss

from .._validation import binary_labels
from ..algorithms.encrypted import combine as ec, driver, he, label
from ..algorithms.encrypted.params import DEFAULTS, WEIGHT_BOUND, EncryptedParams
from ..algorithms.encrypted.params import LABEL_MECHANISMS  # noqa: F401 - public here too (the class docstring)
from ..algorithms.encrypted.party import BLOCK_BITS
from ..data.prepare import clip_rows
from ..exceptions import InvalidDataError
from ._party_columns import party_blocks
from ._sklearn import binary_classifier_tags, target


class VerticalEncryptedClassifier(ClassifierMixin, BaseEstimator):
    """Vertical logistic regression, one joint model; gradients under OU encryption with DP noise on both sides.

    Parameters
    ----------
    epsilon : each feature party's (ε, δ) over its ``rounds`` backward releases (record relation); ``None``: no
        feature noise. NOTE: the forward pass is not covered (module docstring).
    label_epsilon : the labels' ε (one label changes); ``None``: no label noise.
    label_mechanism : ``"rr"`` (default): the label party puts its training labels once through randomized
        response at ``label_epsilon`` (pure ε, δ = 0) and uses only those in the run: every message that leaves it
        is post-processing of that release whatever the other parties compute (no premise). ``"gaussian"`` (the
        mechanism before 2026-11-28): exact labels, Gaussian noise on every gradient it decrypts, (ε, δ) over the
        rounds — its guarantee needs every non-label party to return D̂ᵀĝ honestly (one that returns a packed
        linear map of the encrypted residuals reads the labels); choosing it is accepting that premise.
    delta : δ of every (ε, δ).
    rounds, step, momentum, lam : T rounds of (heavy-ball) gradient descent with this step on the mean loss +
        (λ/2)‖w‖²; ``None``: the mode's defaults (clear: 60, 8, 0; encrypted: 40, 2, 0.7), λ = 1e-4.
    forward : ``"encrypted"`` (default; see below) or ``"clear"`` (logistic loss; per-row score sums reach the label party: features NOT private) or
        ``"encrypted"`` (any number of non-label parties; the Taylor residual ½ + s/4 − y; the scores travel under
        each party's own key; features private against an honest-but-curious label party (and peers); ``calibration`` ×
        n rows are held out of the fit, scored by the parties as new records, for the label party's final model:
        ``combine``).
    weight_bound : W = W₀, the projection radius of every party's weights (forward="encrypted"; the sensitivities'
        premise |s| ≤ R·W). Default 2 (:data:`WEIGHT_BOUND`; 4 before 2026-11-27): a public constant, chosen on
        tables other than the ones it is reported on (BENCHMARKS.md, "The encrypted vertical protocol").
    row_clip : R, every party's row clip (the sensitivities' premise).
    combine : forward="encrypted": the label party's final model (:mod:`dpadmm.algorithms.encrypted.combine`;
        post-processing at the label party, no ε): ``"weighted"`` (default) — on its held-out rows, its OWN model
        (its own columns standardised, exact labels; it never leaves it) plus the other parties' score with one
        non-negative weight, or the stacked fit ``c + a·own + b·Σ scores`` if better there by two standard errors
        of a 5-fold cross-validation — either only if it also beats its own model alone in that cross-validation,
        at every size (issue 38); ``"choose"`` (the default before) — the stacked fit if better than its own
        model alone by that test, else its own model; ``"stacked"`` — the stacked fit always; ``"joint"`` — the
        joint score Platt-scaled. ``combination_`` says which was kept (``None``: the joint model; fewer than 10
        held-out rows: its own model).
    random_state : ``None``: party-local noise; an int: a seeded simulation.
    party_sizes : the column → party map when ``X`` is one (N, d) matrix: each party's count of consecutive columns,
        the label party's first, e.g. ``[66, 57]`` or ``[40, 40, 43]``; ``None``: two parties, the label party
        holding the first ⌈d/2⌉ columns. A list of party blocks (block 0: the label party's) ignores it. With one
        matrix the estimator goes into a ``Pipeline``, ``cross_val_score`` or ``GridSearchCV``
        (:mod:`dpadmm.estimators._party_columns`; the same map as :class:`~dpadmm.VerticalExpertsClassifier`'s).
        A scaler in front of it is fitted on every column at once: a simulation's convenience, not what separate
        parties can do without a release (each scales its own columns by public bounds in a deployment).

    Notes
    -----
    ``fit``, ``decision_function``, ``predict_proba``, ``predict``, ``score`` and ``score_metrics`` take either form of
    ``X``. After ``fit``: ``coefs_`` (the label party's weights, then each party's), ``classes_``, ``privacy_``,
    ``cost_``, ``calibration_``, ``combination_``, ``n_features_in_``.
    """

    DEFAULTS: ClassVar[dict] = DEFAULTS  # each forward mode's defaults of rounds, step and momentum

    def __init__(self, epsilon: float | None = None, label_epsilon: float | None = None, delta: float = 1e-5,
                 rounds: int | None = None, step: float | None = None, lam: float = 1e-4, row_clip: float = 1.0,
                 forward: str = "encrypted", momentum: float | None = None, weight_bound: float = WEIGHT_BOUND,
                 calibration: float = 0.1, random_state=None, combine: str = ec.DEFAULT_COMBINE,
                 label_mechanism: str = "rr", party_sizes=None):
        self.epsilon, self.label_epsilon, self.delta = epsilon, label_epsilon, delta
        self.rounds, self.step, self.lam, self.row_clip, self.random_state = rounds, step, lam, row_clip, random_state
        self.forward, self.momentum, self.weight_bound, self.calibration = forward, momentum, weight_bound, calibration
        self.combine, self.label_mechanism, self.party_sizes = combine, label_mechanism, party_sizes

    def _params(self) -> EncryptedParams:
        """The public parameters as the driver's checked record (raises on a bad value)."""
        names = {f.name for f in dataclasses.fields(EncryptedParams)}
        return EncryptedParams(**{k: v for k, v in self.get_params(deep=False).items() if k in names})

    def _check(self, blocks, name: str = "X") -> list:
        """The parameters checked (raises on a bad value), then the party blocks from a list of blocks or one matrix
        split by ``party_sizes``; once fitted, as many as in fit."""
        self._params()
        blocks = party_blocks(self, blocks, name)
        if hasattr(self, "coefs_") and len(blocks) != len(self.coefs_):
            raise InvalidDataError(f"expected {len(self.coefs_)} party blocks (as in fit), got {len(blocks)}; give the "
                                   "same parties' columns")
        return blocks

    def fit(self, blocks: Sequence, y, *, callbacks: Sequence[Callable] = ()):
        """Run the protocol in-process. ``blocks``: one block per party (the label party's first) or one (N, d) matrix
        split by ``party_sizes``; ``y``: two classes; ``callbacks``: ``cb(round, record)`` after each of the T rounds
        (a progress display's; :func:`dpadmm.algorithms.encrypted.driver.run`)."""
        he.require_he()  # one line with the install command when the extra is missing
        params = self._params()  # a bad parameter is refused before the data is read
        for name in ("n_features_in_", "coefs_"):  # a refit is a new fit: any columns, any parties
            self.__dict__.pop(name, None)
        blocks = self._check(blocks)
        y = target(y, classes=True)
        fitted = driver.fit(params, blocks, y, callbacks=callbacks)
        self.classes_, self.coefs_ = fitted.classes, fitted.coefs
        self.label_cfg_, self.cost_ = fitted.label_cfg, fitted.cost
        self.calibration_, self.combination_, self.own_model_ = fitted.calibration, fitted.combination, fitted.own_model
        self.noise_multipliers_ = fitted.noise_multipliers
        self.privacy_ = fitted.privacy
        self.n_features_in_ = int(sum(b.shape[1] for b in blocks))
        return self

    def decision_function(self, blocks) -> np.ndarray:
        """The label party's final logit: the joint score Platt-scaled (``combination_`` ``None``), or
        ``c + a·own + b·Σ_m s_m`` with its own model (``combination_.weights``; the own model alone: (0, 1, 0))."""
        if not hasattr(self, "coefs_"):
            raise NotFittedError("this VerticalEncryptedClassifier is not fitted yet; call fit first.")
        blocks = self._check(blocks)
        others = np.sum([np.asarray(he.quantize(clip_rows(b, float(self.row_clip)), BLOCK_BITS) @ w).ravel()
                         / float(2 ** BLOCK_BITS) for b, w in zip(blocks[1:], self.coefs_[1:])], axis=0)
        choice = getattr(self, "combination_", None)
        if choice is not None:
            c, a, b = choice.weights
            return c + a * self.own_model_.logit(blocks[0]) + b * others
        own = label.own_scores(float(self.row_clip), self.coefs_[0], blocks[0])
        a, b = self.calibration_
        return a * (own + others) + b

    def predict_proba(self, blocks) -> np.ndarray:
        p = 1.0 / (1.0 + np.exp(-np.clip(self.decision_function(blocks), -500, 500)))
        return np.column_stack([1 - p, p])

    def predict(self, blocks) -> np.ndarray:
        s = self.decision_function(blocks)  # first: an unfitted model raises NotFittedError
        return self.classes_[(s > 0).astype(int)]

    def __sklearn_tags__(self):
        return binary_classifier_tags(super().__sklearn_tags__(), sparse=True)

    def score_metrics(self, blocks, y) -> dict:
        """Log loss and accuracy on ``(blocks, y)`` (either form of ``blocks``)."""
        p = self.predict_proba(blocks)[:, 1]
        y_pm, _ = binary_labels("y", y, p.shape[0])
        return {"log_loss": float(log_loss(y_pm > 0, p, labels=[False, True])),
                "accuracy": float(np.mean((p > 0.5) == (y_pm > 0)))}
