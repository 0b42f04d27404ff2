"""Vertical "independent experts" regression: each feature party's own DP ridge on its columns, stacked by the label
party with its own model, or its own model alone when the stack does not beat it (issue 41).

The protocol, threat model and sensitivity proof are in :mod:`dpadmm.algorithms.experts.regression`, the label
party's side in :mod:`dpadmm.algorithms.experts.driver_regression`, its choice in
:mod:`dpadmm.algorithms.experts.stack`. This estimator runs the parties in the caller's process (a simulation of the
deployment: party m's step sees only its block and the scaled labels it is sent).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.exceptions import NotFittedError
from sklearn.metrics import mean_absolute_error, r2_score

from ..algorithms.experts import driver_regression as rd
from ..algorithms.experts.regression import HUBER_KAPPA
from ..exceptions import InvalidDataError
from ._party_columns import party_blocks
from ._sklearn import target


class VerticalExpertsRegressor(RegressorMixin, BaseEstimator):
    """Vertical linear regression (amounts) as per-party DP experts stacked by the label party.

    Parameters
    ----------
    lam : ridge of every model (the label party's ``Ridge(alpha=lam·n)`` on its standardised columns; a private party
        raises its own, see ``expert_lambdas_``).
    epsilon, delta : each feature party's record-level (ε, δ) for its one output-perturbed model (and its DP column
        range estimate with ``bounds="dp"``); ``None`` fits the non-private experts.
    label_range : ``(lo, hi)``, the declared range the labels are clipped to before they are sent (scaled to
        [−1, 1]). Required with ``epsilon`` (a range read off the labels would move with one label); without it a
        non-private fit reads it off the labels. The label party's own model uses the exact, unclipped labels.
    loss : ``"squared"`` (default) or ``"huber"`` (threshold ``huber_kappa`` in the scaled units, where the range's
        half-width is 1): what each feature party minimises; its sensitivity is that loss's.
    row_clip, bounds, noise_norm, random_state, party_sizes : as :class:`~dpadmm.VerticalExpertsClassifier`
        (``noise_norm`` in the scaled label units; default ``NOISE_NORM``).
    calibrate : the label party holds out ``HELDOUT_FRACTION`` of its rows (their labels are never sent) and on them
        keeps a least-squares stack of its own model and the experts only if it beats its own model by two standard
        errors of repeated K-fold cross-validation (``calibration_``); otherwise its own model, exactly "the label
        party alone". ``False``: its prediction plus each expert's deviation from the training mean.
    label_epsilon : refused (the labels are sent exactly in this protocol; see the labels-only protocol).

    Notes
    -----
    After ``fit``: ``coefs_``, ``own_coef_``, ``expert_lambdas_``, ``experts_`` (public facts), ``calibration_``,
    ``label_range_``, ``privacy_`` (a :class:`PrivacyReport`, or ``None`` if non-private).
    """

    NOISE_NORM = rd.NOISE_NORM

    def __init__(self, lam: float = 1e-3, epsilon: float | None = None, delta: float = 1e-5, label_range=None,
                 loss: str = "squared", huber_kappa: float = HUBER_KAPPA, row_clip: float = 1.0,
                 noise_norm: float = rd.NOISE_NORM, random_state=None, bounds="dp", calibrate: bool = True,
                 party_sizes=None, label_epsilon: float | None = None):
        self.lam, self.epsilon, self.delta, self.label_range = lam, epsilon, delta, label_range
        self.loss, self.huber_kappa, self.row_clip, self.noise_norm = loss, huber_kappa, row_clip, noise_norm
        self.random_state, self.bounds, self.calibrate = random_state, bounds, calibrate
        self.party_sizes, self.label_epsilon = party_sizes, label_epsilon

    def _params(self) -> "rd.RegressionParams":
        """The public parameters as the driver's checked record (raises on a bad value)."""
        return rd.RegressionParams.of(**{k: v for k, v in self.get_params(deep=False).items() if k != "party_sizes"})

    def fit(self, blocks: Sequence, y):
        """Fit every party's expert and the label party's choice. ``blocks``: one block per party (the label party's
        first) or one (N, d) matrix split by ``party_sizes``; ``y``: the label party's amounts."""
        self.__dict__.pop("n_features_in_", None)
        params = self._params()
        blocks = party_blocks(self, blocks)
        y = target(y, classes=False)
        self.n_features_in_ = int(sum(B.shape[1] for B in blocks))
        f = rd.fit(params, blocks, y)
        self._fitted = f
        self.n_blocks_, self.noise_source_, self.own_coef_ = f.n_blocks, f.noise_source, f.own_coef
        self.coefs_, self.expert_lambdas_, self.experts_ = f.coefs, f.expert_lambdas, f.experts
        self.calibration_, self.privacy_, self.label_range_ = f.calibration, f.privacy, f.label_range
        self.column_bounds_ = f.column_bounds
        return self

    def fit_remote(self, own_block, y, backend, parties, heldout=None):
        """The label party's side of a deployment: ``own_block`` its own block (it stays here), ``parties`` each feature
        party's name → ``(train, {key: new-records reference})`` (:class:`~dpadmm.protocol.PartyData`, or arrays on the
        in-process backend), ``backend`` runs them (each serves ``vertical-experts``). ``heldout = (key, own_rows,
        labels)``: labelled records outside the fit, a new-records file ``key`` at every party: the label party
        chooses on them (``calibration_``). Predict new records with :meth:`remote_predict`."""
        params = self._params()
        own = party_blocks(self, [own_block, own_block])[0]
        f = rd.fit_remote(params, own, target(y, classes=False), backend, parties, heldout=heldout)
        self._fitted = f
        self.n_blocks_, self.noise_source_, self.own_coef_ = f.n_blocks, f.noise_source, f.own_coef
        self.coefs_, self.expert_lambdas_, self.experts_ = [], f.expert_lambdas, f.experts
        self.calibration_, self.privacy_, self.label_range_ = f.calibration, f.privacy, f.label_range
        self.n_features_in_ = int(own.shape[1])
        return self

    def remote_predict(self, own_block, key: str = "test") -> np.ndarray:
        """A deployment's prediction on new records: the label party's rows ``own_block`` and each party's rows of its
        new-records file ``key`` (requested over the backend)."""
        if getattr(getattr(self, "_fitted", None), "remote", None) is None:
            raise NotFittedError("this VerticalExpertsRegressor has no deployment; call fit_remote first.")
        return rd.remote_predict(self._fitted, np.asarray(own_block, dtype=np.float64), key)

    def predict(self, blocks) -> np.ndarray:
        """The label party's prediction (its choice ``calibration_``) on ``blocks``, in the label's raw units."""
        if not hasattr(self, "coefs_"):
            raise NotFittedError("this VerticalExpertsRegressor is not fitted yet; call fit first.")
        if self._fitted.remote is not None:
            raise InvalidDataError("this model's parties keep their models (fit_remote): predict new records with "
                                   "remote_predict(own_block, key)")
        blocks = party_blocks(self, blocks)
        if len(blocks) != self.n_blocks_:
            raise InvalidDataError(f"expected {self.n_blocks_} blocks (as in fit), got {len(blocks)}")
        return rd.predict(self._fitted, blocks, float(self.row_clip))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True  # CSR blocks stay sparse
        return tags

    @staticmethod
    def metrics_from_prediction(pred, y) -> dict:
        """RMSE, MAE and R² of a prediction against the labels ``y``."""
        pred, y = np.asarray(pred, dtype=np.float64), np.asarray(y, dtype=np.float64)
        return {"rmse": float(np.sqrt(np.mean((y - pred) ** 2))), "mae": float(mean_absolute_error(y, pred)),
                "r2": float(r2_score(y, pred))}

    def score_metrics(self, blocks, y) -> dict:
        """RMSE, MAE and R² on ``(blocks, y)``."""
        return self.metrics_from_prediction(self.predict(blocks), y)
