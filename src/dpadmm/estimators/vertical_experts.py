"""Vertical "independent experts" classifier: each party's own DP model, combined by the label party.

The protocol, its threat model and its sensitivity proof are in :mod:`dpadmm.algorithms.experts.model`; its accounting in
:mod:`dpadmm.algorithms.experts.report`.
This estimator runs the parties in the caller's process (a simulation of the deployment: party m's steps
see only its block and what the label party sends it, the labels).
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import NotFittedError
from sklearn.metrics import log_loss, roc_auc_score

from ..algorithms.experts import driver, model as experts_model, params as experts_params, prepare as xp
from ..algorithms.experts.alone import label_party_alone_proba, standardise  # noqa: F401 - the CLI imports it from here
from ..algorithms.experts.driver import ExpertsData
from ..algorithms.experts.params import ExpertsParams
from ..exceptions import InvalidDataError
from ._party_columns import party_blocks
from ._sklearn import binary_classifier_tags, target


class VerticalExpertsClassifier(ClassifierMixin, BaseEstimator):
    """Vertical logistic regression as a product of per-party DP experts (no per-row release in training).

    Parameters
    ----------
    lam : ridge of every party's model (a private party may raise its own; see ``expert_lambdas_``).
    epsilon, delta : each feature party's record-level (ε, δ) for its one output-perturbed model; ``None``
        fits the non-private experts.
    label_epsilon : ε of the one randomized-response release of the labels to the other parties; ``None``
        sends them exactly (the labels are then not protected).
    row_clip : R, the norm at which every feature party clips its rows (the sensitivity's premise).
    bounds : how each feature party bounds its raw-unit columns before that (:mod:`dpadmm.algorithms.experts.prepare`):
        ``"dp"`` (default) — a DP estimate of each column's range on its own rows, paid from its own ε (the report
        lists those releases); a list with one entry per feature party, each ``(lo, hi)`` declared by its operator
        (public, nothing released), ``"dp"`` or ``None``; ``None`` — every block used as given (already scaled by
        public bounds), rows clipped at R. Columns are mapped to [−1, 1] by their bounds and the block scaled by
        R/√d: no row is clipped and no per-row normalisation erases a column's scale. (A party's own
        standardisation is not covered by the record relation: one record moves every row.)
    noise_norm : the expected norm of the coefficient noise a private party aims for when it picks its ridge.
    min_effective_rows : with ``label_epsilon``, the label party sends the randomized-response labels only if
        ``n (1 − 2q)²`` — the number of exact labels as informative as n labels flipped with probability q (public:
        n and ε) — is at least this (default ``MIN_EFFECTIVE_ROWS``); below it no label is sent, nothing is
        released, and the label party keeps its own model (``kept_own_model_``).
    random_state : ``None`` draws each party's noise from OS entropy; a seed makes a seeded simulation.
    party_sizes : the column → party map when ``X`` is one (N, d) matrix: each party's count of consecutive columns,
        the label party's first, e.g. ``[66, 57]``; ``None``: two parties, the label party holding the first ⌈d/2⌉
        columns. A list of party blocks ignores it. With one matrix the estimator goes into a ``Pipeline``,
        ``cross_val_score`` or ``GridSearchCV`` (:mod:`dpadmm.estimators._party_columns`).
    calibrate : the label party holds out ``HELDOUT_FRACTION`` of its training rows (labels for them are never
        sent; the parties fit on the others) and on them chooses, by repeated K-fold cross-validation at every size,
        between a stacked combination (its own logit and one weight per expert) and its own model
        (:mod:`dpadmm.algorithms.experts.calibrate`: post-processing at the label party, no privacy cost; each party
        still releases once). ``calibration_`` says which it kept. A deployment (``fit_remote``) chooses the same way
        on labelled held-out records it is given (``heldout``: a new-records file at every party), else hands over
        the product of experts as fitted.

    Notes
    -----
    Block 0 of ``fit``'s ``blocks`` is the label party's; it standardises its own columns with its own statistics
    (nothing about them is released: its block, its model and the combination never leave it) and fits its model
    on its exact labels. After ``fit``: ``coefs_`` (each expert's coefficient, the last entry the intercept column's),
    ``own_coef_``, ``expert_lambdas_``, ``privacy_`` (a :class:`PrivacyReport`, or ``None`` if non-private).
    """

    def __init__(self, lam: float = 1e-3, epsilon: float | None = None, delta: float = 1e-5,
                 label_epsilon: float | None = None, row_clip: float = 1.0, noise_norm: float = 0.5,
                 min_effective_rows: float | None = None, random_state=None, bounds="dp", calibrate: bool = True,
                 party_sizes=None):
        self.lam, self.epsilon, self.delta, self.label_epsilon = lam, epsilon, delta, label_epsilon
        self.party_sizes = party_sizes
        self.bounds, self.calibrate = bounds, calibrate
        self.row_clip, self.noise_norm, self.random_state = row_clip, noise_norm, random_state
        self.min_effective_rows = min_effective_rows

    #: the smallest ``n (1 − 2q)²`` at which the label party sends randomized-response labels to the experts
    #: (:data:`dpadmm.algorithms.experts.params.MIN_EFFECTIVE_ROWS`, where the benchmark that chose it is described)
    MIN_EFFECTIVE_ROWS = experts_params.MIN_EFFECTIVE_ROWS
    #: the in-process fit's note (:data:`dpadmm.algorithms.experts.driver.SIMULATION_NOTE`)
    SIMULATION_NOTE = driver.SIMULATION_NOTE

    def _params(self) -> ExpertsParams:
        """The public parameters as the driver's checked record (raises on a bad value)."""
        names = {f.name for f in dataclasses.fields(ExpertsParams)}
        return ExpertsParams(**{k: v for k, v in self.get_params(deep=False).items() if k in names})

    def _check(self, blocks):
        blocks = self._split(blocks)
        return blocks[0].shape[0], blocks

    def _split(self, X, name: str = "X") -> list:
        """Party blocks from a list of blocks, or from one matrix by ``party_sizes``
        (:func:`dpadmm.estimators._party_columns.party_blocks`)."""
        return party_blocks(self, X, name)

    def fit(self, blocks: Sequence, y):
        """Fit every party's expert and the label party's combination. ``blocks``: one block per party (the label
        party's first) or one (N, d) matrix split by ``party_sizes``; ``y``: two classes. The feature parties run the
        deployed protocol's step (:func:`dpadmm.algorithms.experts.party.fit_step`) on the in-process backend."""
        self.__dict__.pop("n_features_in_", None)  # a refit is a new fit: any column count
        params = self._params()
        n, blocks = self._check(blocks)
        y = target(y, classes=True)
        self.n_features_in_ = int(sum(B.shape[1] for B in blocks))
        self._set(driver.fit(params, ExpertsData(blocks, y)))
        return self

    def _set(self, fitted: "driver.FitResult") -> None:
        """The fitted attributes from the driver's result (``column_bounds_`` only from an in-process fit)."""
        self.classes_, self.n_blocks_, self.noise_source_ = fitted.classes, fitted.n_blocks, fitted.noise_source
        self.own_coef_, self.own_scaling_, self.prior_logit_ = fitted.own_coef, fitted.own_scaling, fitted.prior_logit
        self.flip_probability_, self.effective_rows_ = fitted.flip_probability, fitted.effective_rows
        self.kept_own_model_, self.calibration_, self.privacy_ = fitted.kept_own_model, fitted.calibration, fitted.privacy
        self.coefs_, self.expert_lambdas_, self.experts_ = fitted.coefs, fitted.expert_lambdas, fitted.experts
        if fitted.column_bounds is not None:
            self.column_bounds_ = fitted.column_bounds

    def _expert_logits(self, blocks) -> list:
        bounds = getattr(self, "column_bounds_", [(None, None)] * len(self.coefs_))
        return [experts_model.expert_logit(c, xp.apply(B, lo, hi, float(self.row_clip)), float(self.row_clip),
                                self.flip_probability_) for c, B, (lo, hi) in zip(self.coefs_, blocks, bounds)]

    def fit_remote(self, own_block, y, backend, parties: Mapping[str, tuple], heldout=None):
        """The label party's side of a deployment: ``own_block`` is its own block (it stays here), ``parties`` maps
        each feature party's name (``party2``, …) to ``(train, score)`` — a :class:`~dpadmm.protocol.PartyData`
        reference to its training rows and ``{key: PartyData}`` of its NEW-records files — and ``backend`` runs
        them (``GrpcBackend``: every party serves ``vertical-experts``). Each party fits and keeps its model
        (:mod:`dpadmm.algorithms.experts.party`); :meth:`remote_decision` asks for logits on new records.
        When the label party keeps its own model (``kept_own_model_``) no party is contacted.

        ``heldout = (key, own_rows, labels)``: labelled records outside the fit (its rows and labels here, each party's
        rows of its new-records file ``key``): the label party chooses on them between the combination and its own
        model, as an in-process fit does on its held-out rows (``calibration_``; :func:`dpadmm.algorithms.experts.
        driver.choice`); without them it hands over the product of experts as fitted, with no choice."""

        params = self._params()
        own_block = self._check([own_block, own_block])[1][0]
        fitted = driver.fit_remote(params, own_block, y, backend, parties, heldout=heldout)
        self._set(fitted)
        self.remote_ = (backend, fitted.remote_names)  # the backend stays open for remote_decision (the caller's)
        return self

    def remote_decision(self, own_block, key: str = "test") -> np.ndarray:
        """The combined logit on new records: the label party's own model on ``own_block`` plus each party's logit
        on its rows of its new-records file ``key`` (requested over the backend; post-processing of its model)."""
        backend, names = self.remote_
        own = self._own_logit(own_block)
        experts = [np.asarray(backend.request(name, "logit", key), dtype=np.float64) for name in names]
        if any(e.shape != own.shape for e in experts):
            raise InvalidDataError(f"a party scored {[e.shape[0] for e in experts]} rows of {key!r}, the label party "
                                   f"{own.shape[0]}; align the new records (same ids) at every party")
        return self._final_logit(own, experts)

    def _final_logit(self, own, experts) -> np.ndarray:
        """The label party's final logit from its own logit and the experts' (its choice ``calibration_``: the own
        model, the stacked weights, or — without a choice — the product of experts)."""
        cal = getattr(self, "calibration_", None)
        if cal is not None and cal.kind == "own model":
            return own
        if cal is None:
            return experts_model.combine(own, experts, self.prior_logit_)
        c, a, *b = cal.weights  # one weight per expert (c + a·own + Σ_m b_m·(expert_m − prior))
        return c + a * own + sum(w * (e - self.prior_logit_) for w, e in zip(b, experts))

    def _own_logit(self, X) -> np.ndarray:
        """The label party's own model's logit on its rows ``X`` (standardised by its own training statistics)."""
        return np.asarray(experts_model.augment(standardise(X, getattr(self, "own_scaling_", None)), 1.0) @ self.own_coef_).ravel()

    def decision_function(self, blocks) -> np.ndarray:
        """The combined logit: the label party's own model plus each party's (de-biased) expert logit (the own
        model alone when it was kept: ``kept_own_model_``)."""
        if not hasattr(self, "coefs_"):
            raise NotFittedError("this VerticalExpertsClassifier is not fitted yet; call fit first.")
        blocks = self._split(blocks)
        if len(blocks) != self.n_blocks_:
            raise InvalidDataError(f"expected {self.n_blocks_} blocks (as in fit), got {len(blocks)}")
        own = self._own_logit(blocks[0])
        cal = getattr(self, "calibration_", None)
        if cal is not None and cal.kind == "own model":
            return own
        return self._final_logit(own, self._expert_logits(blocks[1:]))

    def predict_proba(self, blocks) -> np.ndarray:
        p = 1.0 / (1.0 + np.exp(-np.clip(self.decision_function(blocks), -50, 50)))
        return np.column_stack([1 - p, p])

    def predict(self, blocks) -> np.ndarray:
        s = self.decision_function(blocks)  # first: an unfitted model raises NotFittedError
        return self.classes_[(s > 0).astype(int)]

    def __sklearn_tags__(self):
        return binary_classifier_tags(super().__sklearn_tags__(), sparse=True)

    def score_metrics(self, blocks, y) -> dict:
        """Log loss, accuracy and AUC on ``(blocks, y)``."""
        return self.metrics_from_logit(self.decision_function(blocks), y)

    def metrics_from_logit(self, logit, y) -> dict:
        """Log loss, accuracy and AUC of the combined logit (in-process or :meth:`remote_decision`)."""
        logit = np.asarray(logit, dtype=np.float64)
        p = 1.0 / (1.0 + np.exp(-np.clip(logit, -50, 50)))
        y = np.asarray(y)
        return {"log_loss": float(log_loss(y, p, labels=self.classes_)),
                "accuracy": float(np.mean(self.classes_[(logit > 0).astype(int)] == y)),
                "auc": float(roc_auc_score(y == self.classes_[1], p))}
