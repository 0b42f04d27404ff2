"""Vertical "independent experts" with K declared classes: each feature party's ONE multi-output DP ridge on one-hot
targets, stacked multinomially by the label party with its own model, or its own model alone when the stack does
not beat it (issue 41).

The mechanism and its sensitivity proof are in :mod:`dpadmm.algorithms.experts.multiclass`, the label party's side in
:mod:`dpadmm.algorithms.experts.driver_multiclass`, its choice in :mod:`dpadmm.algorithms.experts.stack_multiclass`.
This estimator runs the parties in the caller's process (a simulation of the deployment: party m's step sees only
its block and the one-hot targets it is sent: of the exact labels, or with ``label_epsilon`` of the label party's
k-ary randomized-response release).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import NotFittedError
from sklearn.metrics import log_loss

from ..algorithms.experts import driver_multiclass as md
from ..algorithms.experts.params import ExpertsParams
from ..exceptions import InvalidDataError, InvalidParameterError
from ._party_columns import party_blocks
from ._sklearn import checked_classes, declared_labels, target

__all__ = ["VerticalExpertsMulticlassClassifier"]


class VerticalExpertsMulticlassClassifier(ClassifierMixin, BaseEstimator):
    """Vertical multinomial classification as per-party DP experts stacked by the label party.

    Parameters
    ----------
    classes : the class labels, DECLARED (required with ``epsilon`` or ``label_epsilon``): K is the shape of every
        party's release and the alphabet of the labels' randomized response, so a private fit never reads it off the
        labels. Without privacy the classes default to those in ``y``. A label outside them is refused when the labels
        are sent exactly; with ``label_epsilon`` it is counted as the first class before the release (refusing would
        depend on that one label).
    lam : ridge of every model (the label party's ``LogisticRegression(C=1/(lam n))`` on its standardised columns; a
        private party raises its own, see ``expert_lambdas_``).
    epsilon, delta : each feature party's record-level (ε, δ) for its ONE output-perturbed (d+1)×K model (and its DP
        column-range estimate with ``bounds="dp"``); ``None`` fits the non-private experts.
    label_epsilon : ε of the label party's one k-ary randomized-response release of the labels it sends (pure ε,
        δ = 0, against the other parties); the label party's own model and its choice use its exact labels locally.
        ``None``: the labels are sent exactly (not protected).
    row_clip, bounds, random_state, party_sizes : as :class:`~dpadmm.VerticalExpertsClassifier`.
    noise_norm : the noise norm a private party aims for over its (d+1)K released entries (default ``NOISE_NORM``).
    calibrate : the label party holds out ``HELDOUT_FRACTION`` of its rows (their labels are never sent) and keeps a
        multinomial stack of its own model and the experts' scores only if it beats its own model's log loss by two
        standard errors of repeated K-fold cross-validation (``calibration_``); otherwise its own model, exactly "the
        label party alone". ``False``: a softmax of its own log-probabilities plus the experts' centred scores.

    Notes
    -----
    After ``fit``: ``classes_``, ``coefs_`` (per feature party, (d_m + 1, K)), ``expert_lambdas_``, ``experts_``
    (public facts), ``calibration_``, ``change_probability_`` (with ``label_epsilon``), ``privacy_`` (a
    :class:`PrivacyReport`, or ``None`` if nothing is protected and nothing noised).
    """

    NOISE_NORM = md.NOISE_NORM

    def __init__(self, classes: Any = None, lam: float = 1e-3, epsilon: float | None = None, delta: float = 1e-5,
                 label_epsilon: float | None = None, row_clip: float = 1.0, noise_norm: float = md.NOISE_NORM,
                 random_state=None, bounds="dp", calibrate: bool = True, party_sizes: Sequence[int] | None = None):
        self.classes, self.lam, self.epsilon, self.delta = classes, lam, epsilon, delta
        self.label_epsilon, self.row_clip, self.noise_norm = label_epsilon, row_clip, noise_norm
        self.random_state, self.bounds, self.calibrate, self.party_sizes = random_state, bounds, calibrate, party_sizes

    def _params(self) -> ExpertsParams:
        return ExpertsParams(lam=self.lam, epsilon=self.epsilon, delta=self.delta, label_epsilon=self.label_epsilon,
                             row_clip=self.row_clip, noise_norm=self.noise_norm, random_state=self.random_state,
                             bounds=self.bounds, calibrate=self.calibrate)

    def _encode(self, y, n: int) -> np.ndarray:
        """The labels' class indices among the declared (or, non-private, observed) classes (class docstring)."""
        private = self.epsilon is not None or self.label_epsilon is not None
        if self.classes is None and private:
            raise InvalidParameterError("a private experts fit needs its classes declared: give classes=[...] (K is the "
                                        "shape of every party's release and the randomized response's alphabet; the "
                                        "classes seen in the labels would depend on them)")
        arr = target(y, classes=self.classes is None)
        if arr.shape[0] != n:
            raise InvalidDataError(f"y has {arr.shape[0]} entries but X has {n} rows; they must match.")
        if self.classes is None:
            classes, idx = np.unique(arr, return_inverse=True)
            if classes.size < 2:
                raise InvalidDataError(f"y has {classes.size} class; a classifier needs labels of at least two classes.")
        else:
            classes = checked_classes(self.classes)
            idx = declared_labels(classes, arr, private=self.label_epsilon is not None)
            idx = np.where(idx == classes.size, 0, idx)  # label-private: the first class (no refusal)
        self.classes_ = classes
        return np.asarray(idx, dtype=np.int64)

    def fit(self, blocks, y):
        """Fit every party's expert and the label party's choice. ``blocks``: one block per party (the label party's
        first) or one (N, d) matrix split by ``party_sizes``; ``y``: the label party's labels."""
        self.__dict__.pop("n_features_in_", None)
        params = self._params()
        blocks = party_blocks(self, blocks)
        idx = self._encode(y, blocks[0].shape[0])
        self.n_features_in_ = int(sum(B.shape[1] for B in blocks))
        f = md.fit(params, blocks, idx, self.classes_.size)
        self._fitted = f
        self.n_blocks_, self.noise_source_, self.coefs_ = f.n_blocks, f.noise_source, f.coefs
        self.expert_lambdas_, self.experts_, self.calibration_ = f.expert_lambdas, f.experts, f.calibration
        self.change_probability_, self.privacy_, self.column_bounds_ = f.change_probability, f.privacy, f.column_bounds
        return self

    def fit_remote(self, own_block, y, backend, parties, heldout=None):
        """The label party's side of a deployment: ``own_block`` its own block (it stays here), ``parties`` each feature
        party's name → ``(train, {key: new-records reference})`` (:class:`~dpadmm.protocol.PartyData`, or arrays on the
        in-process backend), ``backend`` runs them (each serves ``vertical-experts``). ``heldout = (key, own_rows,
        labels)``: labelled records outside the fit, a new-records file ``key`` at every party: the label party chooses
        on them (``calibration_``). Predict new records with :meth:`remote_predict`."""
        params = self._params()
        own = party_blocks(self, [own_block, own_block])[0]
        idx = self._encode(y, own.shape[0])
        if heldout is not None:
            key, rows, labels = heldout
            hidx = declared_labels(self.classes_, target(labels, classes=False), private=False)
            heldout = (key, np.asarray(rows, dtype=np.float64), hidx)
        f = md.fit_remote(params, own, idx, self.classes_.size, backend, parties, heldout=heldout)
        self._fitted = f
        self.n_blocks_, self.noise_source_, self.coefs_ = f.n_blocks, f.noise_source, []
        self.expert_lambdas_, self.experts_, self.calibration_ = f.expert_lambdas, f.experts, f.calibration
        self.change_probability_, self.privacy_ = f.change_probability, f.privacy
        self.n_features_in_ = int(own.shape[1])
        return self

    def remote_predict_proba(self, own_block, key: str = "test") -> np.ndarray:
        """A deployment's (rows, K) probabilities on new records: the label party's rows ``own_block`` and each party's
        rows of its new-records file ``key`` (requested over the backend)."""
        if getattr(getattr(self, "_fitted", None), "remote", None) is None:
            raise NotFittedError("this VerticalExpertsMulticlassClassifier has no deployment; call fit_remote first.")
        return md.remote_predict(self._fitted, np.asarray(own_block, dtype=np.float64), key)

    def predict_proba(self, blocks) -> np.ndarray:
        """The label party's (rows, K) class probabilities (its choice ``calibration_``), columns in ``classes_``."""
        if not hasattr(self, "coefs_"):
            raise NotFittedError("this VerticalExpertsMulticlassClassifier is not fitted yet; call fit first.")
        if self._fitted.remote is not None:
            raise InvalidDataError("this model's parties keep their models (fit_remote): predict new records with "
                                   "remote_predict_proba(own_block, key)")
        blocks = party_blocks(self, blocks)
        if len(blocks) != self.n_blocks_:
            raise InvalidDataError(f"expected {self.n_blocks_} blocks (as in fit), got {len(blocks)}")
        return md.predict_proba(self._fitted, blocks, float(self.row_clip))

    def predict(self, blocks) -> np.ndarray:
        """The most probable declared class per row."""
        proba = self.predict_proba(blocks)  # first: it refuses an unfitted model
        return self.classes_[np.argmax(proba, axis=1)]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True  # CSR blocks stay sparse
        return tags

    def score_metrics(self, blocks, y) -> dict:
        """Log loss and accuracy on ``(blocks, y)`` (labels among ``classes_``)."""
        proba = self.predict_proba(blocks)
        y = np.asarray(y)
        return {"log_loss": float(log_loss(y, proba, labels=self.classes_)),
                "accuracy": float(np.mean(self.classes_[np.argmax(proba, axis=1)] == y))}
