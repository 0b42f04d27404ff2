"""Vertical logistic regression learned jointly under encryption (protocol ``vertical-encrypted``).

The protocol, its threat model (the forward pass's per-row scores are NOT protected) and its proofs are in
:mod:`dpadmm.algorithms.encrypted.protocol`. This estimator runs the parties in the caller's process (a
simulation: the driver holds every block, and collects each party's weights to score new records).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.metrics import log_loss

from .._validation import as_float_matrix, binary_labels, check_positive, noise_seed
from ..algorithms.encrypted import driver, he, label
from ..algorithms.encrypted.party import BLOCK_BITS
from ..algorithms.encrypted.protocol import PROTOCOL
from ..algorithms.vertical_data import clip_rows
from ..backends.inprocess import InProcessBackend
from ..exceptions import InvalidDataError, InvalidParameterError
from ..privacy.accountants import calibrate_noise_multiplier, gaussian_epsilon

FORWARD_NOT_PROTECTED = ("features: NOT differentially private against the label party: the forward pass reveals each "
                         "training row's score sum with weights it knows (see dpadmm.algorithms.encrypted.protocol); "
                         "the epsilon given covers the backward releases only")


class VerticalEncryptedClassifier(ClassifierMixin, BaseEstimator):
    """Vertical logistic regression, one joint model; gradients under OU encryption with DP noise on both sides.

    Parameters
    ----------
    epsilon : each feature party's (ε, δ) over its ``rounds`` backward releases (record relation); ``None``: no
        feature noise. NOTE: the forward pass is not covered (module docstring).
    label_epsilon : the labels' (ε, δ) over the rounds (one label changes); ``None``: no label noise.
    delta, rounds, step, lam : δ; T rounds of gradient descent with this step on the mean loss + (λ/2)‖w‖².
    row_clip : R, every party's row clip (the sensitivities' premise).
    random_state : ``None``: party-local noise; an int: a seeded simulation.
    """

    def __init__(self, epsilon: float | None = None, label_epsilon: float | None = None, delta: float = 1e-5,
                 rounds: int = 60, step: float = 8.0, lam: float = 1e-4, row_clip: float = 1.0, random_state=None):
        self.epsilon, self.label_epsilon, self.delta = epsilon, label_epsilon, delta
        self.rounds, self.step, self.lam, self.row_clip, self.random_state = rounds, step, lam, row_clip, random_state

    def _check(self, blocks):
        for k in ("delta", "step", "lam", "row_clip"):
            check_positive(k, getattr(self, k))
        for k in ("epsilon", "label_epsilon"):
            if getattr(self, k) is not None:
                check_positive(k, getattr(self, k))
        if not (isinstance(self.rounds, (int, np.integer)) and self.rounds >= 1):
            raise InvalidParameterError(f"rounds must be a positive integer, got {self.rounds!r}; pass e.g. rounds=60")
        if not isinstance(blocks, (list, tuple)) or len(blocks) < 2:
            raise InvalidDataError("blocks must be a list of at least two party blocks (block 0: the label party's); "
                                   "pass [X_label_party, X_party2, ...]")
        blocks = [as_float_matrix(f"blocks[{m}]", b, accept_sparse=True) for m, b in enumerate(blocks)]
        if any(b.shape[0] != blocks[0].shape[0] for b in blocks):
            raise InvalidDataError(f"every block needs the same rows; got row counts {[b.shape[0] for b in blocks]}")
        return blocks

    def fit(self, blocks: Sequence, y):
        he.require_he()  # one line with the install command when the extra is missing
        blocks = self._check(blocks)
        y_pm, self.classes_ = binary_labels("y", y, blocks[0].shape[0])
        T = int(self.rounds)
        zf = calibrate_noise_multiplier(float(self.epsilon), float(self.delta), T) if self.epsilon else None
        zl = calibrate_noise_multiplier(float(self.label_epsilon), float(self.delta), T) if self.label_epsilon else None
        seed = noise_seed(self.random_state)
        names = [f"party{m + 1}" for m in range(1, len(blocks))]
        backend = InProcessBackend()
        backend.start(driver.specs({n: (b, None) for n, b in zip(names, blocks[1:])}, R=self.row_clip,
                                   noise_multiplier=zf, rounds=T, lam=self.lam, step_size=self.step), noise_seed=seed,
                      rounds=2 * T + 2)
        res = driver.run(backend, blocks[0], y_pm, names, {n: b.shape[1] for n, b in zip(names, blocks[1:])},
                         {n: float(self.row_clip) for n in names}, R=float(self.row_clip), label_noise_multiplier=zl,
                         rounds=T, lam=float(self.lam), step_size=float(self.step), noise_seed=seed)
        # in-process simulation: the driver collects each party's weights to score new records
        self.coefs_ = [np.asarray(res.label_state.w)] + [PROTOCOL.model(backend.hosts[n].cfg, backend.hosts[n].state)
                                                         for n in names]
        self.label_cfg_, self.cost_ = res.label_cfg, res.cost
        self.noise_multipliers_ = {"features": zf, "labels": zl}
        self.privacy_ = self._report(res.events)
        return self

    def _report(self, events) -> dict:
        d = float(self.delta)
        by_party: dict[str, list] = {}
        for e in events:
            by_party.setdefault((e.party, e.relation.key), []).append(e.noise_multiplier)
        feat = {p: gaussian_epsilon(z, d) for (p, rel), z in by_party.items() if rel != "label"}
        lab = {p: gaussian_epsilon(z, d) for (p, rel), z in by_party.items() if rel == "label"}
        return {"features": {"epsilon": math.inf, "backward_epsilon": feat or None, "delta": d,
                             "note": FORWARD_NOT_PROTECTED},
                "labels": {"epsilon": max(lab.values()) if lab else math.inf, "delta": d,
                           "relation": "label", "note": "Gaussian on every block's gradient, sensitivity "
                           f"{self.label_cfg_.sensitivity:.4g} per round" if lab else "labels not protected"},
                "accountant": "dp-accounting PLD", "rounds": int(self.rounds)}

    def decision_function(self, blocks) -> np.ndarray:
        blocks = [as_float_matrix(f"blocks[{m}]", b, accept_sparse=True) for m, b in enumerate(blocks)]
        own = np.asarray(label.augment(clip_rows(blocks[0], float(self.row_clip)), float(self.row_clip))
                         @ self.coefs_[0]).ravel()
        others = [np.asarray(he.quantize(clip_rows(b, float(self.row_clip)), BLOCK_BITS) @ w).ravel()
                  / float(2 ** BLOCK_BITS) for b, w in zip(blocks[1:], self.coefs_[1:])]
        return own + np.sum(others, axis=0)

    def predict_proba(self, blocks) -> np.ndarray:
        p = 1.0 / (1.0 + np.exp(-np.clip(self.decision_function(blocks), -500, 500)))
        return np.column_stack([1 - p, p])

    def predict(self, blocks) -> np.ndarray:
        return self.classes_[(self.decision_function(blocks) > 0).astype(int)]

    def score_metrics(self, blocks, y) -> dict:
        y_pm, _ = binary_labels("y", y, blocks[0].shape[0])
        p = self.predict_proba(blocks)[:, 1]
        return {"log_loss": float(log_loss(y_pm > 0, p, labels=[False, True])),
                "accuracy": float(np.mean((p > 0.5) == (y_pm > 0)))}
