"""The SGD-based vertical baseline of [Hu, §5] as an estimator (non-private)."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted

from .. import engine
from .._validation import binary_labels, check_int, check_positive, noise_seed
from ..backends import PartySpec, get_backend
from ..fit import runner
from ..kernels.losses import get_loss
from ..algorithms.vertical.driver import party_names as _party_names
from ._sklearn import binary_classifier_tags, target
from .vertical import _VerticalADMM
from ..algorithms.vertical import sgd
from ..algorithms.vertical.protocol import SGD_PROTOCOL


class VerticalSGDClassifier(ClassifierMixin, BaseEstimator):
    """The SGD-based vertical baseline [Hu, §5]: per-party linear models, outputs summed, minibatch
    SGD driven by the coordinator's shared residual (see :mod:`dpadmm.algorithms.vertical.sgd`).
    Non-private; monitoring (``history_``) is recorded once per epoch.

    ``X`` is a list of per-party blocks (the first holds the labels' party), or one matrix whose columns
    ``party_sizes=[d₁, d₂, …]`` split among the parties in order (one party when ``None``), so that the estimator goes
    into ``Pipeline``, ``cross_val_score`` and ``GridSearchCV`` like the other vertical estimators."""

    def __init__(self, *, lam: float = 1e-3, lr: float = 0.5, batch_size: int = 256, epochs: int = 10,
                 decay: float = 0.0, random_state: Any = None, backend: Any = "inprocess",
                 party_sizes: Any = None):
        self.lam = lam
        self.lr = lr
        self.batch_size = batch_size
        self.epochs = epochs
        self.decay = decay
        self.random_state = random_state
        self.backend = backend
        self.party_sizes = party_sizes

    def _helper(self) -> _VerticalADMM:
        helper = _VerticalADMM()
        helper.party_sizes = self.party_sizes
        return helper

    def fit(self, X, y, *, eval_set=None, callbacks=()):
        check_positive("lam", self.lam, allow_zero=True)
        check_positive("lr", self.lr)
        check_int("batch_size", self.batch_size)
        check_int("epochs", self.epochs)
        helper = self._helper()
        blocks = helper._blocks(X)
        n = blocks[0].shape[0]
        y_pm, self.classes_ = binary_labels("y", target(y, classes=True), n)
        evals = {}
        for k, (Xe, ye) in (eval_set or {}).items():
            be = helper._blocks(Xe, f"eval_set[{k!r}]")
            evals[k] = (be, np.where(np.asarray(ye).ravel() == self.classes_[1], 1.0, -1.0))
        names = _party_names(len(blocks))
        Setup = SGD_PROTOCOL.setup_type  # sgd.setup_party's arguments by name
        specs = [PartySpec.of(SGD_PROTOCOL, name, Setup(name=name, D=B, options={
                     "lam": float(self.lam), "eval_blocks": {k: Xe[m] for k, (Xe, _) in evals.items()}}))
                 for m, (name, B) in enumerate(zip(names, blocks))]
        per_epoch = sgd.rounds_per_epoch(n, int(self.batch_size))
        hub_cfg = sgd.SGDHubConfig(labels=y_pm, loss=get_loss("logistic"), lam=float(self.lam), lr=float(self.lr),
                                   batch_size=int(self.batch_size), party_names=tuple(names), decay=float(self.decay),
                                   eval_labels={k: v for k, (_, v) in evals.items()})
        hub = engine.Hub(hub_cfg, sgd.init_hub, sgd.hub_step, sgd.hub_metrics, metrics_every=per_epoch)
        backend = get_backend(self.backend)
        nseed = noise_seed(self.random_state)
        fitted = runner.run(backend, specs, hub, rounds=per_epoch * int(self.epochs), noise_seed=nseed,
                            callbacks=callbacks,
                            after=lambda b, _: [b.request(nm, "coef") for nm in names])  # non-private baseline
        res, self.coefs_ = fitted.result, fitted.after
        self.party_dims_ = tuple(B.shape[1] for B in blocks)
        self.n_features_in_ = int(sum(self.party_dims_))
        # keep only monitored rounds (once per epoch)
        self.history_ = {k: v for k, v in res.history.items() if k not in ("round", "seconds")}
        self.history_["seconds"] = [s for s, r in zip(res.history["seconds"], res.history["round"]) if r % per_epoch == 0]
        self.intercept_ = 0.0
        return self

    def __sklearn_tags__(self):
        return binary_classifier_tags(super().__sklearn_tags__(), sparse=True)

    def decision_function(self, X):
        """Sum of the parties' partial scores ``X_m x_m``."""
        check_is_fitted(self, "coefs_")
        helper = self._helper()
        helper.n_features_in_, helper.party_dims_ = self.n_features_in_, self.party_dims_  # the fitted widths
        blocks = helper._blocks(X)
        return sum(B @ c for B, c in zip(blocks, self.coefs_))

    def predict_proba(self, X):
        p = 1.0 / (1.0 + np.exp(-np.clip(self.decision_function(X), -500, 500)))
        return np.column_stack([1.0 - p, p])

    def predict(self, X):
        s = self.decision_function(X)
        return self.classes_[(s > 0).astype(int)]
