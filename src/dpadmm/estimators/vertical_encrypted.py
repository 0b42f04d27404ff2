"""Vertical logistic regression learned jointly under encryption (protocol ``vertical-encrypted``).

The protocol, its threat model (the forward pass's per-row scores are NOT protected) and its proofs are in
:mod:`dpadmm.algorithms.encrypted.protocol`. This estimator runs the parties in the caller's process (a
simulation: the driver holds every block, and collects each party's weights to score new records).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss

from .._validation import as_float_matrix, binary_labels, check_positive, noise_seed
from ..fit import encrypted as driver
from ..fit import runner
from ..algorithms.encrypted import combine as ec
from ..algorithms.encrypted import he, label
from ..algorithms.encrypted.party import BLOCK_BITS
from ..data.prepare import clip_rows
from ..backends.base import party_rng
from ..backends.inprocess import InProcessBackend
from ..exceptions import InvalidDataError, InvalidParameterError
from ..privacy.accountants import calibrate_noise_multiplier
from ..algorithms.encrypted.report import (FORWARD_ENCRYPTED, FORWARD_NOT_PROTECTED,  # noqa: F401  (their home)
                                           encrypted_report)


#: the default weight bound W = W₀ (forward="encrypted"): the best or tied of W ∈ {0.5, 1, 2, 4, 8} on three tables
#: other than fair and a9a at ε ∈ {0.5, 1, 3} (``benchmarks/bench_encrypted_tables.py``); smaller W means smaller
#: sensitivities (2R·G and 2√2·R₀·R·W grow with it) and scores where the Taylor residual stays close to the logistic
#: one, larger W a larger model — without noise 2 and 4 gave the same (BENCHMARKS.md). A public constant: no data.
WEIGHT_BOUND = 2.0

#: the label mechanisms (``label_mechanism``): randomized response at the label party (default), or its Gaussian
#: on the decrypted gradients (a premise on the other parties: the class docstring)
LABEL_MECHANISMS = ("rr", "gaussian")


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
        of a 5-fold cross-validation; ``"choose"`` (the default before) — the stacked fit if better than its own
        model alone by that test, else its own model; ``"stacked"`` — the stacked fit always; ``"joint"`` — the
        joint score Platt-scaled. ``combination_`` says which was kept (``None``: the joint model, also when fewer
        than 200 rows are held out).
    random_state : ``None``: party-local noise; an int: a seeded simulation.
    """

    DEFAULTS: ClassVar[dict] = {"clear": {"rounds": 60, "step": 8.0, "momentum": 0.0},
                "encrypted": {"rounds": 40, "step": 2.0, "momentum": 0.7}}

    def __init__(self, epsilon: float | None = None, label_epsilon: float | None = None, delta: float = 1e-5,
                 rounds: int | None = None, step: float | None = None, lam: float = 1e-4, row_clip: float = 1.0,
                 forward: str = "encrypted", momentum: float | None = None, weight_bound: float = WEIGHT_BOUND,
                 calibration: float = 0.1, random_state=None, combine: str = ec.DEFAULT_COMBINE,
                 label_mechanism: str = "rr"):
        self.epsilon, self.label_epsilon, self.delta = epsilon, label_epsilon, delta
        self.rounds, self.step, self.lam, self.row_clip, self.random_state = rounds, step, lam, row_clip, random_state
        self.forward, self.momentum, self.weight_bound, self.calibration = forward, momentum, weight_bound, calibration
        self.combine, self.label_mechanism = combine, label_mechanism

    def _param(self, name):
        v = getattr(self, name)
        return self.DEFAULTS[self.forward][name] if v is None else v

    def _check(self, blocks):
        if self.forward not in self.DEFAULTS:
            raise InvalidParameterError(f"forward must be 'clear' or 'encrypted', got forward={self.forward!r}.")
        for k in ("delta", "lam", "row_clip", "weight_bound"):
            check_positive(k, getattr(self, k))
        check_positive("step", self._param("step"))
        check_positive("momentum", self._param("momentum"), allow_zero=True)
        if self.label_mechanism not in LABEL_MECHANISMS:
            raise InvalidParameterError(f"label_mechanism must be one of {LABEL_MECHANISMS}, got "
                                        f"label_mechanism={self.label_mechanism!r}.")
        if self.combine not in ec.COMBINE_MODES:
            raise InvalidParameterError(f"combine must be one of {ec.COMBINE_MODES}, got combine={self.combine!r}.")
        if not 0 < float(self.calibration) < 1:
            raise InvalidParameterError(f"calibration must be in (0, 1), got calibration={self.calibration!r}.")
        for k in ("epsilon", "label_epsilon"):
            if getattr(self, k) is not None:
                check_positive(k, getattr(self, k))
        T = self._param("rounds")
        if not (isinstance(T, (int, np.integer)) and T >= 1):
            raise InvalidParameterError(f"rounds must be a positive integer, got {T!r}; pass e.g. rounds=60")
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
        T, enc = int(self._param("rounds")), self.forward == "encrypted"
        step, mom, W = float(self._param("step")), float(self._param("momentum")), float(self.weight_bound)
        # forward="encrypted": per round D̂ᵀĝ, A₀ᵀs and, with M ≥ 2 parties, one column-sum release per peer
        releases = T * (len(blocks) if enc else 1)
        zf = calibrate_noise_multiplier(float(self.epsilon), float(self.delta), releases) if self.epsilon else None
        rr = float(self.label_epsilon) if self.label_epsilon and self.label_mechanism == "rr" else None
        zl = (calibrate_noise_multiplier(float(self.label_epsilon), float(self.delta), T)
              if self.label_epsilon and rr is None else None)
        seed = noise_seed(self.random_state)
        n = blocks[0].shape[0]
        train, hold = np.arange(n), np.zeros(0, dtype=int)
        if enc:  # the label party's public split: held-out rows are scored as new records for the calibration
            perm = np.random.default_rng(0 if seed is None else seed).permutation(n)
            k = round(float(self.calibration) * n)
            hold, train = np.sort(perm[:k]), np.sort(perm[k:])
        names = [f"party{m + 1}" for m in range(1, len(blocks))]
        specs = driver.specs({nm: (b[train], {"calibration": b[hold]} if enc else None)
                              for nm, b in zip(names, blocks[1:])}, R=self.row_clip,
                             noise_multiplier=zf, rounds=T, lam=self.lam, step_size=step, forward=self.forward,
                             momentum=mom, W=W if enc else None, label_W=W if enc else None,
                             label_width=blocks[0].shape[1] + 1 if enc else None)

        def drive(backend):
            return driver.run(backend, blocks[0][train], y_pm[train], names,
                              {nm: b.shape[1] for nm, b in zip(names, blocks[1:])},
                              {nm: float(self.row_clip) for nm in names}, R=float(self.row_clip),
                              label_noise_multiplier=zl, rounds=T, lam=float(self.lam), step_size=step,
                              noise_seed=seed, forward=self.forward, momentum=mom, W=W if enc else None,
                              label_epsilon=rr)

        def after(backend, res):
            # in-process simulation: the driver collects each party's weights to score new records, and (encrypted
            # forward) the party's logits on the held-out rows (new records) for the calibration
            models = [backend.local_model(nm) for nm in names]
            return models, [backend.request(nm, "logit", "calibration") for nm in names] if enc else None

        fitted = runner.session(InProcessBackend(), specs, drive, noise_seed=seed,
                                rounds=driver.backend_rounds(T, self.forward, len(names)), after=after,
                                blas_threads=None)
        res, (models, others) = fitted.result, fitted.after
        self.coefs_ = [np.asarray(res.label_state.w)] + models
        self.label_cfg_, self.cost_ = res.label_cfg, res.cost
        self.calibration_, self.combination_, self.own_model_ = (1.0, 0.0), None, None
        if enc:  # Platt scaling on the held-out rows: the parties' logits on them (new records), the label party's labels
            others = np.sum([np.asarray(o, dtype=np.float64) for o in others], axis=0)
            s = label.own_scores(float(self.row_clip), self.coefs_[0], blocks[0][hold]) + others
            lr = LogisticRegression(C=1e6, tol=1e-10, max_iter=1000).fit(s[:, None], y_pm[hold] > 0)
            self.calibration_ = (float(lr.coef_[0, 0]), float(lr.intercept_[0]))
            # the label party's final model (post-processing there; algorithms.encrypted.combine): its own model
            # fitted on its training rows, stacked with the parties' logits on the held-out rows, or kept alone
            own = ec.own_model(blocks[0][train], y_pm[train])
            rng = np.random.default_rng() if seed is None else party_rng(seed, len(names) + 1, 0)
            self.combination_ = ec.choose(self.combine, own.logit(blocks[0][hold]), others, y_pm[hold], rng)
            if self.combination_ is not None:  # then its own model on all its rows (their labels are never sent)
                self.own_model_ = ec.own_model(blocks[0], y_pm)
        self.noise_multipliers_ = {"features": zf, "labels": zl}
        self.privacy_ = self._report(res.events)
        return self

    def _report(self, events) -> dict:
        return encrypted_report(events, delta=float(self.delta), forward=self.forward,
                                label_sensitivity=self.label_cfg_.sensitivity, rounds=int(self._param("rounds")),
                                combination=None if self.combination_ is None else self.combination_.kind,
                                parties=len(self.label_cfg_.widths))

    def decision_function(self, blocks) -> np.ndarray:
        """The label party's final logit: the joint score Platt-scaled (``combination_`` ``None``), or
        ``c + a·own + b·Σ_m s_m`` with its own model (``combination_.weights``; the own model alone: (0, 1, 0))."""
        blocks = [as_float_matrix(f"blocks[{m}]", b, accept_sparse=True) for m, b in enumerate(blocks)]
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
        return self.classes_[(self.decision_function(blocks) > 0).astype(int)]

    def score_metrics(self, blocks, y) -> dict:
        y_pm, _ = binary_labels("y", y, blocks[0].shape[0])
        p = self.predict_proba(blocks)[:, 1]
        return {"log_loss": float(log_loss(y_pm > 0, p, labels=[False, True])),
                "accuracy": float(np.mean((p > 0.5) == (y_pm > 0)))}
