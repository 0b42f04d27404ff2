"""Labels-only vertical regression: the label party releases its real-valued labels once by randomized response on
bins (:func:`dpadmm.privacy.label_mechanisms.rr_on_bins`, pure label-ε) — or its counts by randomized response on bins
over clipped counts (:func:`dpadmm.privacy.label_counts.rr_on_counts`, ``loss="poisson"``) — ADMM sharing runs on
the released labels, and the label party refits on its exact labels.

Protocol (three steps, one release):

1. The label party (party 1, which is also the coordinator) releases ỹ = RR-on-bins(y) at ``label_epsilon``: a DP
   (or declared) range, a Laplace prior and randomized response on the optimal bins — pure ε under one label
   changing (the proof is in :mod:`dpadmm.privacy.label_mechanisms`); counts: a DP (or declared) upper bound U, the
   clip at U, a Laplace prior and randomized response on the Poisson-optimal bins, pure ε likewise (the proof is in
   :mod:`dpadmm.privacy.label_counts`).
2. :class:`~dpadmm.estimators.vertical.VerticalLinearRegression` (squared or Huber loss), or
   :class:`~dpadmm.estimators.vertical.VerticalPoissonRegression` for counts, unchanged and non-private
   on the features, fits ỹ: every message of that run is a function of ỹ and the parties' features, so it is
   post-processing of step 1 and costs no label budget. The passive parties' features are not protected (this is
   the labels-only protocol: add a feature-side mechanism for that).
3. The label party refits its own block, the intercept and a weight α on the sum of the others' last shares on its
   *exact* labels, and keeps that model or its own, whichever cross-validates better on its own rows
   (:func:`dpadmm.algorithms.vertical.label.refit_label_block` with ``choose=fallback``): the refit calibrates the
   others' direction learned from ỹ (whose conditional mean is a shrunk, shifted version of y's). That model stays
   with the label party; it uses the shares it already received, so it costs nothing either.

The run's label ε is the sum of the release's ``PureDPRelease`` events (:class:`~dpadmm.privacy.ledger.PrivacyLedger`
pure composition), reported in ``privacy_``.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin

import scipy.sparse as sp

from .._validation import as_vector, check_choice, noise_seed
from ..algorithms.vertical.label import refit_label_block
from ..algorithms.vertical.messages import PartyConfig, PartyState
from ..exceptions import InvalidDataError, InvalidParameterError
from ..privacy.events import LABEL_CHANGE
from ..privacy.label_counts import check_counts, rr_on_counts
from ..privacy.label_mechanisms import rr_on_bins
from ..privacy.ledger import PrivacyLedger
from ._sklearn import target
from ._vertical_config import _VerticalConfig
from .vertical import VerticalLinearRegression, VerticalPoissonRegression

__all__ = ["LabelPrivateVerticalRegression", "release_count_labels", "release_regression_labels"]

#: what ``privacy_["label"]["mechanism"]`` says of each release
MECHANISMS = {"bins": "randomized response on bins (Ghazi et al. 2023): DP range, Laplace prior, optimal bins",
              "counts": "randomized response on bins over clipped counts (Ghazi et al. 2023, Poisson loss): DP upper "
                        "bound, Laplace prior, optimal bins"}


def _label_rng(random_state):
    seed = noise_seed(random_state)
    return np.random.default_rng(None if seed is None else [seed, 0x4C52])  # the label party's stream


def release_regression_labels(y, label_epsilon: float, *, random_state=None, label_range=None, n_bins: int = 32,
                              bins_loss: str = "squared", prior_fraction: float = 0.1, range_fraction: float = 0.1):
    """The label party's one release of real-valued labels (step 1 of the module docstring), from its own generator
    (OS entropy unless ``random_state`` is given). Returns the :class:`~dpadmm.privacy.label_mechanisms.BinsRelease`."""
    return rr_on_bins(y, float(label_epsilon), rng=_label_rng(random_state), label_range=label_range, n_bins=n_bins,
                      loss=bins_loss, prior_fraction=prior_fraction, range_fraction=range_fraction, party="party1")


def release_count_labels(y, label_epsilon: float, *, random_state=None, upper: int | None = None, n_bins: int = 32,
                         prior_fraction: float = 0.1, range_fraction: float = 0.1):
    """The label party's one release of count labels (step 1 for ``loss="poisson"``), from the same generator as
    :func:`release_regression_labels`. Returns the :class:`~dpadmm.privacy.label_mechanisms.BinsRelease`."""
    return rr_on_counts(y, float(label_epsilon), rng=_label_rng(random_state), upper=upper, n_bins=n_bins,
                        prior_fraction=prior_fraction, range_fraction=range_fraction, party="party1")


class LabelPrivateVerticalRegression(RegressorMixin, _VerticalConfig, BaseEstimator):
    """Vertical linear regression with the labels protected by randomized response on bins (module docstring).

    Parameters
    ----------
    label_epsilon : total label ε (pure, δ = 0) of the one release (> 0).
    loss : ``"squared"`` or ``"huber"``: the loss of the joint fit and of the label party's refit; ``"poisson"`` for
        counts (labels non-negative integers): the count release, Poisson regression (log link) for the joint fit and
        the refit, and predictions ``exp(η)``.
    label_range : ``(lo, hi)`` declared by the label party's operator, or None (default) for a DP range from
        ``range_fraction`` of ε. Labels are clipped to it for the release only (the refit uses the exact labels).
        For counts ``(0, U)``: U the largest count the release keeps (an integer ≥ 1); None: a DP bound.
    n_bins : public bins of the range for the prior (m).
    bins_loss : the loss the output bins minimise (``squared``, ``absolute``, ``huber``, ``poisson``); counts always
        use ``poisson``.
    prior_fraction, range_fraction : shares of ε for the Laplace prior and the DP range.
    lam : ridge λ of the joint fit and the refit (per-sample scaling, as :class:`VerticalLinearRegression`).
    max_iter, tol : of the joint ADMM run on the released labels (its rounds are free).
    fallback : the label party keeps its own model when the joint one does not cross-validate better.
    random_state : seed of the release and the run (None: fresh OS entropy).
    party_sizes : column counts when X is one matrix.

    Attributes
    ----------
    coefs_ : per-party coefficients of the final model (the label party's refit block first; the others' fitted
        blocks times ``passive_weight_``), ``intercept_``, ``passive_weight_`` (α), ``label_party_choice_``
        (``"joint"`` or ``"alone"``), ``label_party_cv_``, ``release_`` (range, bins, budget split), ``privacy_``,
        ``n_iter_`` (rounds of the joint run).
        The final model and ``label_party_cv_`` are functions of the exact labels, local to the label party
        (``privacy_["local"]``); ``joint_`` and ``release_`` are post-processing of the release.
    """

    def __init__(self, *, label_epsilon: float = 1.0, loss: str = "squared", label_range=None, n_bins: int = 32,
                 bins_loss: str = "squared", prior_fraction: float = 0.1, range_fraction: float = 0.1,
                 lam: float = 1e-3, max_iter: int | str = "auto", tol: float | None = 2e-3, fallback: bool = True,
                 random_state: Any = None, party_sizes: Sequence[int] | None = None):
        self.label_epsilon = label_epsilon
        self.loss = loss
        self.label_range = label_range
        self.n_bins = n_bins
        self.bins_loss = bins_loss
        self.prior_fraction = prior_fraction
        self.range_fraction = range_fraction
        self.lam = lam
        self.max_iter = max_iter
        self.tol = tol
        self.fallback = fallback
        self.random_state = random_state
        self.party_sizes = party_sizes

    def _joint(self) -> VerticalLinearRegression:
        common = dict(lam=self.lam, max_iter=self.max_iter, tol=self.tol, party_sizes=self.party_sizes,
                      random_state=self.random_state)
        if self.loss == "poisson":
            return VerticalPoissonRegression(**common)
        return VerticalLinearRegression(loss=self.loss, **common)

    def _release(self, y):
        """Step 1: the one release (counts for ``loss="poisson"``); a bad parameter raises naming it."""
        try:
            if self.loss != "poisson":
                return release_regression_labels(
                    y, self.label_epsilon, random_state=self.random_state, label_range=self.label_range,
                    n_bins=self.n_bins, bins_loss=self.bins_loss, prior_fraction=self.prior_fraction,
                    range_fraction=self.range_fraction)
            upper = None
            if self.label_range is not None:
                lo, upper = self.label_range
                if lo != 0:
                    raise ValueError(f"label_range for counts must be (0, U), got {self.label_range!r}.")
            return release_count_labels(y, self.label_epsilon, random_state=self.random_state, upper=upper,
                                        n_bins=self.n_bins, prior_fraction=self.prior_fraction,
                                        range_fraction=self.range_fraction)
        except ValueError as exc:
            raise InvalidParameterError(str(exc)) from None

    def fit(self, X, y):
        """Release the labels once, fit the joint model on them, refit at the label party (module docstring)."""
        check_choice("loss", self.loss, ("squared", "huber", "poisson"))
        if self.label_epsilon is None or not float(self.label_epsilon) > 0:
            raise InvalidParameterError(f"label_epsilon must be > 0, got {self.label_epsilon!r} (this estimator always "
                                        "protects the labels; use VerticalLinearRegression for a non-private fit).")
        for name in ("party_dims_", "n_features_in_"):  # a refit is a new fit: any column count
            self.__dict__.pop(name, None)
        joint = self._joint()
        blocks = self._blocks(X)  # once fitted, the fitted column count and party widths (scikit-learn's checks)
        n = blocks[0].shape[0]
        y = as_vector("y", target(y, classes=False), n)
        if n < 2:
            raise InvalidDataError(f"X has n_samples={n}: the label party's refit cross-validates on its rows; give at "
                                   "least 2 rows.")
        if self.loss == "poisson":
            try:
                y = check_counts(y)
            except ValueError as exc:
                raise InvalidDataError(str(exc)) from None
        release = self._release(y)
        joint.fit(blocks, release.labels)  # post-processing of the release
        D1 = blocks[0] if sp.issparse(blocks[0]) else np.asarray(blocks[0], dtype=np.float64)
        offset = sum(np.asarray(B @ c, dtype=np.float64) for B, c in zip(blocks[1:], joint.coefs_[1:]))
        offset = np.asarray(offset if len(blocks) > 1 else np.zeros(n), dtype=np.float64)
        cfg = PartyConfig(name="party1", D=D1, DT=D1.T, solver=None, lam_sum=n * float(self.lam), reg=None,
                          labels=y)
        out = refit_label_block(cfg, PartyState(np.asarray(joint.coefs_[0], dtype=np.float64), D1 @ joint.coefs_[0]),
                                offset, self.loss, True, intercept0=float(joint.intercept_),
                                choose=bool(self.fallback))
        alpha = float(out["passive_weight"])
        self.coefs_ = [np.asarray(out["coef"])] + [alpha * np.asarray(c) for c in joint.coefs_[1:]]
        self.intercept_ = float(out["intercept"])
        self.passive_weight_, self.label_party_choice_, self.label_party_cv_ = alpha, out["choice"], out["cv"]
        self.party_dims_ = tuple(B.shape[1] for B in blocks)
        self.n_features_in_ = int(sum(self.party_dims_))
        self.joint_, self.n_iter_ = joint, joint.n_iter_
        self.release_ = {"label_range": release.label_range, "outputs": release.outputs, "epsilons": release.epsilons}
        ledger = PrivacyLedger()
        ledger.record(release.events)
        self.privacy_ = {"label": {"epsilon": ledger.pure_epsilons()["party1"], "delta": 0.0,
                                   "relation": LABEL_CHANGE.key,
                                   "mechanism": MECHANISMS["counts" if self.loss == "poisson" else "bins"],
                                   "events": len(ledger)},
                         "features": "not protected (labels-only protocol)",
                         "local": "coefs_, intercept_, passive_weight_, label_party_choice_ and label_party_cv_ are the "
                                  "label party's refit on its exact labels: its own model, not covered by the label "
                                  "epsilon (joint_ and release_ are post-processing of the release)"}
        return self

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True  # CSR blocks stay sparse
        return tags

    def linear_predictor(self, X) -> np.ndarray:
        """The label party's model's score: its block's score plus the intercept plus α times the others' scores."""
        return self._summed_scores(X)

    def predict(self, X) -> np.ndarray:
        """The label party's prediction: the score (:meth:`linear_predictor`), or its exponential for counts."""
        s = self.linear_predictor(X)
        return np.exp(s) if self.loss == "poisson" else s
