"""Vertical "independent experts" classifier: each party's own DP model, combined by the label party.

The protocol, its threat model and its sensitivity proof are in :mod:`dpadmm.algorithms.experts.model`; its accounting in
:mod:`dpadmm.algorithms.experts.report`.
This estimator runs the parties in the caller's process (a simulation of the deployment: party m's steps
see only its block and what the label party sends it, the labels).
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.metrics import log_loss, roc_auc_score

from .._validation import as_float_matrix, binary_labels, check_positive, noise_seed
from ..algorithms.experts import model as experts_model, protocol as experts_protocol
from ..algorithms.vertical import label as vl
from ..exceptions import InvalidDataError, InvalidParameterError
from ..privacy.accountants import calibrate_noise_multiplier
from ..privacy.ledger import PrivacyReport
from ..algorithms.experts.report import LABEL_THREAT, LABELS_SENT, THREAT, experts_report, nothing_released  # noqa: F401
from ..backends.base import party_rng
from ..algorithms.experts import calibrate as xc
from ..algorithms.experts import prepare as xp
from ..algorithms.experts.messages import Setup
from ..algorithms.experts.alone import fit_label_party_alone, label_party_alone_proba, standardise  # noqa: F401
from ..backends.base import PartySpec
from ..fit.experts import fit_parties
from ..data.parties import partition_columns
from ._sklearn import binary_classifier_tags, is_block_list, one_matrix, target


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
    party_sizes : column counts of the parties when ``X`` is one (N, d) matrix (label party first), e.g. ``[66, 57]``;
        ``None``: two parties, the label party holding the first ⌈d/2⌉ columns. A list of party blocks ignores it.
        With one matrix the estimator goes into a ``Pipeline``, ``cross_val_score`` or ``GridSearchCV``.
    calibrate : the label party holds out ``HELDOUT_FRACTION`` of its training rows (labels for them are never
        sent; the parties fit on the others) and on them chooses, by cross-validation, between a stacked
        recalibration of the combination and its own model (:mod:`dpadmm.algorithms.experts.calibrate`: post-
        processing, no privacy cost). ``calibration_`` says which it kept. In-process fits only (``fit``); a
        deployment (``fit_remote``) hands over the product of experts as fitted.

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

    #: the smallest ``n (1 − 2q)²`` at which the label party sends randomized-response labels to the experts. On
    #: the private-utility benchmark (breast_cancer, fair, Adult, a9a at label ε = 0.5, 1, 2, 5, 3 seeds) runs
    #: below 5,000 were at best within noise of the label party alone (breast_cancer, n = 400: 0.168–0.172 vs
    #: 0.172) and at worst far behind it (fair at ε = 0.5: 0.88 vs 0.55; a9a and Adult at ε = 0.5, where
    #: n(1 − 2q)² ≈ 1,950 and 1,810: 0.388 vs 0.362, 0.441 vs 0.438); every run above it was better (a9a and
    #: Adult at ε ≥ 1, n(1 − 2q)² ≥ 6,441). A party fitting on flipped labels, de-biased by 1/(1 − 2q), adds
    #: more noise than signal when too few labels survive the flips.
    MIN_EFFECTIVE_ROWS = 5000.0

    def _check(self, blocks):
        check_positive("lam", self.lam)
        check_positive("row_clip", self.row_clip)
        if not experts_model.R_RANGE[0] <= float(self.row_clip) <= experts_model.R_RANGE[1]:
            raise InvalidParameterError(f"row_clip must be in [{experts_model.R_RANGE[0]:g}, {experts_model.R_RANGE[1]:g}] (the solver's float "
                                        f"range), got {self.row_clip}; scale the rows instead")
        check_positive("noise_norm", self.noise_norm)
        if self.epsilon is not None:
            check_positive("epsilon", self.epsilon)
            check_positive("delta", self.delta)
            if not self.delta < 1:
                raise InvalidParameterError(f"delta must be < 1, got {self.delta}; pass e.g. delta=1e-5")
        if self.label_epsilon is not None:
            check_positive("label_epsilon", self.label_epsilon)
        if self.min_effective_rows is not None and not (math.isfinite(self.min_effective_rows)
                                                        and self.min_effective_rows >= 0):
            raise InvalidParameterError(f"min_effective_rows must be a finite number >= 0, got "
                                        f"{self.min_effective_rows}; pass e.g. min_effective_rows=0 to always send")
        blocks = self._split(blocks)
        n = blocks[0].shape[0]
        if any(b.shape[0] != n for b in blocks):
            raise InvalidDataError(f"every block needs the same rows; got row counts {[b.shape[0] for b in blocks]}")
        return n, blocks

    def _split(self, X, name: str = "X") -> list:
        """Party blocks from a list of blocks, or from one matrix by ``party_sizes`` (see the class docstring)."""
        if is_block_list(X):
            if len(X) < 2:
                raise InvalidDataError("blocks must be a list of at least two party blocks (block 0: the label "
                                       "party's); pass [X_label_party, X_party2, ...] or one matrix with party_sizes")
            return [as_float_matrix(f"blocks[{m}]", b, accept_sparse=True) for m, b in enumerate(X)]
        A = one_matrix(self, X, name)
        d = A.shape[1]
        if self.party_sizes is None:
            if d < 2:
                raise InvalidDataError(f"{name} has {d} feature(s) (n_features = {d}): the experts protocol needs the "
                                       "label party and at least one other party, so at least 2 columns.")
            sizes = [(d + 1) // 2, d // 2]
        else:
            sizes = [int(s) for s in self.party_sizes]
            if len(sizes) < 2 or min(sizes) < 1 or sum(sizes) != d:
                raise InvalidParameterError(f"party_sizes={list(self.party_sizes)} must be two or more positive column "
                                            f"counts summing to {name}'s {d} columns.")
        return partition_columns(A, sizes)

    def _label_side(self, own_block, y, n_blocks: int):
        """The label party's part (it never leaves it): its own model on its exact labels, the prior log-odds, the
        labels it sends (exact or one randomized-response release) and the noise multiplier it asks for. Returns
        ``None`` when it keeps its own model and sends nothing (``kept_own_model_``; ``privacy_`` is set)."""
        n = own_block.shape[0]
        y_pm, self.classes_ = binary_labels("y", y, n)
        self.n_blocks_ = int(n_blocks)
        seed = noise_seed(self.random_state)
        self.noise_source_ = "party-local" if seed is None else "seeded"

        # the label party: its own model on its exact labels (stays with it), the prior log-odds
        self.own_coef_ = self._own_model(own_block, y_pm)
        pos = float(np.clip(np.mean(y_pm > 0), 1e-6, 1 - 1e-6))
        self.prior_logit_ = math.log(pos / (1 - pos))
        sent, pure = y_pm, []
        self.flip_probability_ = None
        self.effective_rows_ = None
        self.kept_own_model_ = False
        if self.label_epsilon is not None:
            q = vl.flip_probability(float(self.label_epsilon))
            self.effective_rows_ = n * (1.0 - 2.0 * q) ** 2
            floor = self.MIN_EFFECTIVE_ROWS if self.min_effective_rows is None else float(self.min_effective_rows)
            if self.effective_rows_ < floor:  # public quantities only: the choice itself releases nothing
                self.kept_own_model_, self.calibration_ = True, None
                self.coefs_, self.expert_lambdas_, self.experts_ = [], [], []
                self.privacy_ = self._nothing_released(floor)
                return None
            # the label party's stream in a seeded simulation: (n_blocks + 1, 0)
            rng = np.random.default_rng() if seed is None else party_rng(seed, n_blocks + 1, 0)
            sent, pure = vl.randomized_response(y_pm, float(self.label_epsilon), rng=rng)
            self.flip_probability_ = q
        z = (calibrate_noise_multiplier(float(self.epsilon), float(self.delta), 1)
             if self.epsilon is not None else None)
        return seed, sent, pure, z

    def _party_bounds(self, k: int) -> list:
        """One bounds entry per feature party (``"dp"``, ``(lo, hi)`` or ``None``), checked."""
        b = self.bounds
        if b is None or isinstance(b, str):
            if b is not None and b not in ("dp", "none"):
                raise InvalidParameterError(f"bounds must be 'dp', None or one (lo, hi) per feature party, got {b!r}")
            return [b] * k
        b = list(b)
        if len(b) != k:
            raise InvalidParameterError(f"bounds has {len(b)} entries for {k} feature parties; give one per party "
                                        "((lo, hi), 'dp' or None)")
        return b

    def fit(self, blocks: Sequence, y):
        """Fit every party's expert and the label party's combination. ``blocks``: one block per party (the label
        party's first) or one (N, d) matrix split by ``party_sizes``; ``y``: two classes."""
        self.__dict__.pop("n_features_in_", None)  # a refit is a new fit: any column count
        n, blocks = self._check(blocks)
        y = target(y, classes=True)
        self.n_features_in_ = int(sum(B.shape[1] for B in blocks))
        side = self._label_side(blocks[0], y, len(blocks))
        if side is None:
            return self
        seed, sent, pure, z = side
        wanted = self._party_bounds(len(blocks) - 1)
        zr, zo = (xp.noise_multipliers(float(self.epsilon), float(self.delta), "dp" in [
            b for b in wanted if isinstance(b, str)]) if z is not None else (None, None))

        self.coefs_, self.expert_lambdas_, events, self.experts_, self.column_bounds_ = [], [], [], [], []
        self.calibration_ = None
        # the label party's held-out rows (its stream (n_blocks + 2, 0)): labels for them are never sent
        cal_rng = np.random.default_rng() if seed is None else party_rng(seed, len(blocks) + 2, 0)
        fit_rows, held = xc.split(n, cal_rng) if self.calibrate else (np.arange(n), None)
        sent = np.asarray(sent)[fit_rows]
        for m, B in enumerate(blocks[1:], start=1):
            B = B[fit_rows] if held is not None else B
            # party m+1's stream is the one it has as the (m−1)-th party of a backend run (fit_remote): same noise
            rng = np.random.default_rng() if seed is None else party_rng(seed, m - 1, 0)
            name, b = f"party{m + 1}", wanted[m - 1]
            own_range = isinstance(b, str) and b == "dp"
            prep = xp.prepare_party(name, B, bounds=b, R=float(self.row_clip), range_noise_multiplier=zr,
                                    model_noise_multiplier=(zo if own_range else
                                                            calibrate_noise_multiplier(float(self.epsilon),
                                                                                       float(self.delta), 1))
                                    if z is not None else None, rng=rng)
            coef, info, ev = experts_model.fit_expert(prep.X, sent, R=float(self.row_clip), lam=float(self.lam),
                                           noise_multiplier=prep.model_noise_multiplier, rng=rng, party=name,
                                           noise_norm=float(self.noise_norm))
            self.coefs_.append(coef)
            self.expert_lambdas_.append(info["lam"])
            self.experts_.append(dict(info, **xp.public_facts(prep)))
            self.column_bounds_.append((prep.lo, prep.hi))
            events += prep.events + ev
        if held is not None:
            self.calibration_ = self._choose(blocks, y, fit_rows, held, cal_rng)
        self.privacy_ = self._report(events, pure, z, simulation=True)
        return self

    def _choose(self, blocks, y, fit_rows, held, rng) -> "xc.Choice":
        """The label party's choice on its held-out rows (:func:`dpadmm.algorithms.experts.calibrate.choose`): its
        own model fitted on the other rows, the parties' logits on the held-out rows (records outside their
        training sets), its held-out labels."""
        y_pm = binary_labels("y", y, blocks[0].shape[0])[0]
        own_fit, scaling = fit_label_party_alone(blocks[0][fit_rows], y_pm[fit_rows], float(self.lam))
        own = np.asarray(experts_model.augment(standardise(blocks[0][held], scaling), 1.0) @ own_fit).ravel()
        experts = self._expert_logits([B[held] for B in blocks[1:]])
        return xc.choose(own, experts_model.combine(np.zeros(len(held)), experts, self.prior_logit_), y_pm[held], rng)

    def _expert_logits(self, blocks) -> list:
        bounds = getattr(self, "column_bounds_", [(None, None)] * len(self.coefs_))
        return [experts_model.expert_logit(c, xp.apply(B, lo, hi, float(self.row_clip)), float(self.row_clip),
                                self.flip_probability_) for c, B, (lo, hi) in zip(self.coefs_, blocks, bounds)]

    #: the in-process fit's note: what the driver holds there that a deployment never releases
    SIMULATION_NOTE = ("in-process simulation: the driver holds every party's block and coefficient (coefs_; "
                       "decision_function scores any rows, training rows included, whose logits the guarantee does not "
                       "cover, and the CLI's rows_clipped is computed from the parties' rows); in a deployment "
                       "(fit_remote, party serve) each party keeps its model and scores only new records")

    def fit_remote(self, own_block, y, backend, parties: Mapping[str, tuple]):
        """The label party's side of a deployment: ``own_block`` is its own block (it stays here), ``parties`` maps
        each feature party's name (``party2``, …) to ``(train, score)`` — a :class:`~dpadmm.protocol.PartyData`
        reference to its training rows and ``{key: PartyData}`` of its NEW-records files — and ``backend`` runs
        them (``GrpcBackend``: every party serves ``vertical-experts``). Each party fits and keeps its model
        (:mod:`dpadmm.algorithms.experts.party`); :meth:`remote_decision` asks for logits on new records.
        When the label party keeps its own model (``kept_own_model_``) no party is contacted."""

        own_block = self._check([own_block, own_block])[1][0]
        names = list(parties)
        self.calibration_ = None  # a deployment's parties fit on every row sent: no held-out choice
        self.remote_ = (backend, [])
        side = self._label_side(own_block, y, len(names) + 1)
        if side is None:
            return self
        seed, sent, pure, z = side
        specs = [PartySpec.of(experts_protocol.PROTOCOL, name, Setup(name=name, train=train, score=dict(score or {}),
                                                       R=float(self.row_clip), lam=float(self.lam), noise_multiplier=z,
                                                       noise_norm=float(self.noise_norm)))
                 for name, (train, score) in parties.items()]
        # one release per party, priced at its Setup; the backend stays open for remote_decision (the caller's)
        replies = fit_parties(backend, specs, sent, self.flip_probability_, noise_seed=seed)
        events = [e for name in names for e in replies[name][1]]
        self.experts_ = [dict(replies[name][0]) for name in names]
        self.expert_lambdas_ = [float(f["lam"]) for f in self.experts_]
        self.remote_ = (backend, names)
        self.privacy_ = self._report(events, pure, z)
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
        return experts_model.combine(own, experts, self.prior_logit_)

    def _own_model(self, X, y_pm) -> np.ndarray:
        """The label party's own ridge-logistic model on its own standardised columns, intercept not penalised (the
        "label party alone" model: :func:`label_party_alone`); returned as ``[w, b]`` so that
        ``augment(standardised X, 1) @ coef`` is its logit (``own_scaling_``: its column statistics, never sent)."""
        coef, self.own_scaling_ = fit_label_party_alone(X, y_pm, float(self.lam))
        return coef

    def _own_logit(self, X) -> np.ndarray:
        """The label party's own model's logit on its rows ``X`` (standardised by its own training statistics)."""
        return np.asarray(experts_model.augment(standardise(X, getattr(self, "own_scaling_", None)), 1.0) @ self.own_coef_).ravel()

    def _nothing_released(self, floor: float) -> PrivacyReport:
        """The report of a fit in which no label was sent and no expert fitted (:func:`dpadmm.algorithms.experts.report.nothing_released`)."""
        return nothing_released(effective_rows=self.effective_rows_, floor=floor, label_epsilon=float(self.label_epsilon),
                                delta=float(self.delta), noise_source=self.noise_source_)

    def _report(self, events, pure, z, simulation: bool = False):
        return experts_report(events, pure, delta=float(self.delta), noise_multiplier=z, noise_source=self.noise_source_,
                              simulation_note=self.SIMULATION_NOTE if simulation else None)

    def decision_function(self, blocks) -> np.ndarray:
        """The combined logit: the label party's own model plus each party's (de-biased) expert logit (the own
        model alone when it was kept: ``kept_own_model_``)."""
        if not hasattr(self, "coefs_"):
            from sklearn.exceptions import NotFittedError

            raise NotFittedError("this VerticalExpertsClassifier is not fitted yet; call fit first.")
        blocks = self._split(blocks)
        if len(blocks) != self.n_blocks_:
            raise InvalidDataError(f"expected {self.n_blocks_} blocks (as in fit), got {len(blocks)}")
        own = self._own_logit(blocks[0])
        cal = getattr(self, "calibration_", None)
        if cal is not None and cal.kind == "own model":
            return own
        experts = self._expert_logits(blocks[1:])
        if cal is None:
            return experts_model.combine(own, experts, self.prior_logit_)
        c, a, b = cal.weights
        return c + a * own + b * experts_model.combine(np.zeros_like(own), experts, self.prior_logit_)

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
