"""Estimators for vertical (feature-partitioned) data: ADMM sharing [Hu] with optional Gaussian DP.

``X`` is given as a list of party blocks ``[X_1, …, X_M]`` (rows aligned, X_1 belongs to the
label-holding party), or as one matrix plus ``party_sizes``.
"""

from __future__ import annotations

import math
import time
import warnings
from typing import Any, Callable, Sequence

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import log_loss, roc_auc_score

from .. import engine
from .._validation import as_vector, binary_labels, check_choice, noise_seed
from ..algorithms import vertical_label as vl
from ..algorithms import vertical_sharing as vs
from ..backends import PartySpec, get_backend
from ..data.parties import row_norms
from ..exceptions import InvalidDataError, PrivacyPreconditionError
from ..kernels.losses import get_loss
from ..kernels.regularizers import get_regularizer
from ..privacy.accountants import calibrate_noise_multiplier
from ..algorithms.vertical.report import hu_report
from ..privacy.threats import THREAT_MODELS, finish
from .._history import History
from ._vertical_config import _VerticalConfig, _is_source
from ..backends.base import party_rng
from ..privacy.events import LABEL_CHANGE, PureDPRelease

class RankDeficiencyWarning(UserWarning):
    """A party block is not of full column rank (handled exactly; see the message)."""


#: the requests a vertical party answers besides its protocol step (declared, nothing else runs)
_HANDLERS = {"coef": vs.party_coef, "rank": vs.party_rank, "score": vs.eval_score}
#: the label party also answers the exact refit of its own block after a label-private run
_LABEL_PARTY_HANDLERS = dict(_HANDLERS, refit=vl.refit_label_block)


def _rr_labels(y, epsilon: float, nseed, n_parties: int, checkpoint_dir, resume_from):
    """The label party's randomized-response release (drawn once per run: a resumed run reuses the
    release stored in the label party's own checkpoint directory, so resuming never releases twice)."""
    from pathlib import Path


    if resume_from is not None and (Path(resume_from) / "rr_labels.npy").is_file():
        return np.load(Path(resume_from) / "rr_labels.npy"), [PureDPRelease("coordinator", 0, epsilon, LABEL_CHANGE)]
    rng = np.random.default_rng() if nseed is None else party_rng(nseed, n_parties + 1, 0)
    y_rr, events = vl.randomized_response(y, epsilon, rng=rng)
    if checkpoint_dir is not None:
        Path(checkpoint_dir).mkdir(parents=True, exist_ok=True)
        np.save(Path(checkpoint_dir) / "rr_labels.npy", y_rr)
    return y_rr, events


def _party_names(n: int) -> list[str]:
    return [f"party{m}" for m in range(1, n + 1)]


class _VerticalADMM(_VerticalConfig, BaseEstimator):
    """Shared implementation; see :class:`VerticalLogisticRegression` for the parameters. Which protocol
    a fit runs and its defaults: :class:`dpadmm.estimators._vertical_config._VerticalConfig`."""

    _loss_name = "logistic"

    def __init__(self, *, lam: float = 1e-3, rho: float | str = "auto", max_iter: int | str = "auto", tol: float = 1e-6,
                 fit_intercept: bool = True, penalty: str = "l2", l1_ratio: float = 0.5,
                 adaptive_rho: bool = False, damping: float | str = "auto", epsilon: float | None = None, delta: float = 1e-5,
                 iteration_epsilon: float | None = None, noise_scale: float | None = None,
                 mechanism: str = "gaussian", relation: str = "feature_column", clip: float | str = "auto",
                 label_epsilon: float | None = None, label_noise_scale: float | None = None,
                 label_mechanism: str = "rr", fallback: bool = True, label_block_scale: float = 1.0,
                 bound: float | str = "auto", accountant: str = "pld", party_sizes: Sequence[int] | None = None,
                 random_state: Any = None, backend: Any = "inprocess", monitor: bool | None = None,
                 solver: str = "auto"):
        self.label_mechanism = label_mechanism
        self.fallback = fallback
        self.label_block_scale = label_block_scale
        self.mechanism = mechanism
        self.relation = relation
        self.clip = clip
        self.label_epsilon = label_epsilon
        self.label_noise_scale = label_noise_scale
        self.lam = lam
        self.rho = rho
        self.max_iter = max_iter
        self.tol = tol
        self.fit_intercept = fit_intercept
        self.penalty = penalty
        self.l1_ratio = l1_ratio
        self.adaptive_rho = adaptive_rho
        self.damping = damping
        self.epsilon = epsilon
        self.delta = delta
        self.iteration_epsilon = iteration_epsilon
        self.noise_scale = noise_scale
        self.bound = bound
        self.accountant = accountant
        self.party_sizes = party_sizes
        self.random_state = random_state
        self.backend = backend
        self.monitor = monitor
        self.solver = solver

    # ------------------------------------------------------------------ fit
    def fit(self, X, y, *, eval_set=None, callbacks: Sequence[Callable] = (), checkpoint_dir=None,
            checkpoint_every=None, resume_from=None, transcript=None):
        """Fit by distributed ADMM sharing.

        Parameters
        ----------
        X : list of (N, d_m) arrays, one per party (the first is the label party), or one (N, d)
            array with ``party_sizes``.
        y : (N,) labels (two classes for the classifier).
        eval_set : dict ``{name: (X_eval, y_eval)}`` or list of pairs (named ``test``, ``eval1``, …);
            their losses are recorded per iteration in ``history_`` (each party scores its own columns).
        callbacks : callables ``cb(round, record) -> bool`` (True stops the run).
        checkpoint_dir, checkpoint_every : write a checkpoint every k rounds (and at the end).
        resume_from : a checkpoint directory; the run continues to the same result as an
            uninterrupted one (same data, parameters and ``random_state``).
        transcript : a :class:`dpadmm.backends.Transcript` (or any callable
            ``(round, sender, receiver, message, kind)``) that records every message.
        """
        t_fit = time.perf_counter()
        mode = self._validate()
        label_mode = self._label_mode()
        mm = self._mm_protocol()
        rr = self._rr()
        refits = self._refits()
        blocks = self._blocks(X)
        n = blocks[0].shape[0]
        y_fit = self._encode_y(y, n)
        loss = get_loss(self._loss_name)
        reg = get_regularizer(self.penalty, self.l1_ratio)
        names = _party_names(len(blocks))
        self.party_dims_ = tuple(B.shape[1] for B in blocks)
        self.n_features_in_ = int(sum(self.party_dims_))
        evals = self._eval_sets(eval_set)
        private = mode is not None  # the feature side
        paper = private and self.mechanism == "paper"
        any_private = private or label_mode
        rho = self._rho(len(blocks), loss)
        max_iter = self._max_iter()
        bx = bounds = None
        assumptions, notes = [], []
        if private:
            if not reg.smooth or (not paper and self.penalty != "l2"):
                raise PrivacyPreconditionError(
                    f"penalty={self.penalty!r}: a private fit needs penalty='l2' (the ridge x-step the sensitivity "
                    "bound is proved for; [Hu, Assumption 2.2] for mechanism='paper').")
        if paper:
            for m, B in enumerate(blocks, start=1):
                if _is_source(B):
                    continue  # checked by the party at setup (require_unit_rows)
                norms = row_norms(B)
                if np.any(np.abs(norms[norms > 0] - 1.0) > 1e-6):
                    raise PrivacyPreconditionError(
                        f"rows of party {m} are not unit-norm (max ||row||_2 = {norms.max():.4g}), which "
                        "[Hu, Assumption 2.3] needs; normalise them (dpadmm.data.normalize_rows or "
                        "--normalize-rows) before a private fit.")
            bounds = self._bounds(n, len(blocks), loss)
            bx = bounds.x
            assumptions = [
                {"name": "unit-norm rows of every party block [Hu, Assumption 2.3]", "status": "checked",
                 "detail": "max | ||row|| - 1 | <= 1e-6 over non-zero rows"},
                {"name": f"bounded iterates ||x_m|| <= {bounds.x:.4g}, ||y|| <= {bounds.y:.4g}, ||z|| <= {bounds.z:.4g} "
                          "[Hu, Assumption 2.1]",
                 "status": "enforced", "detail": "x_m, z and the dual y are projected onto their balls every iteration"},
                {"name": "|R''| <= c1 = 1 [Hu, Assumption 2.2]", "status": "checked", "detail": "penalty='l2'"},
                {"name": "sensitivity C of [Hu, Lemma 1]", "status": "as published",
                 "detail": "the proof's step ||(D_m^T D_m)^-1|| = 1/d_m does not follow from unit-norm rows (docs/algorithms.md §1)"},
            ]
        if private and self.fit_intercept and not label_mode:
            notes.append("the intercept is computed by the label-holding coordinator from the noisy shares and its "
                         "own labels (post-processing); it is not shared")
        nseed = noise_seed(self.random_state)
        monitor = (not any_private) if self.monitor is None else bool(self.monitor)
        n_blocks = len(blocks)
        nm = None
        if mode == "epsilon":
            # the private protocol's first share answers the zero inbox: sensitivity 0, no cost
            costly = max(max_iter - 1, 1) if mm else max_iter
            nm = calibrate_noise_multiplier(self.epsilon, self.delta, costly, self.accountant)
        elif mode == "iteration_epsilon":
            nm = math.sqrt(2.0 * math.log(1.25 / self.delta)) / self.iteration_epsilon  # [Hu, Thm 3]
        label_nm = None
        label_spec = None
        sigma_label = 0.0
        if mm and (rr or not label_mode):  # the linearised coordinator without label noise: labels unprotected,
            label_spec = vl.LabelPrivacy(noise_scale=0.0, rounds=max_iter)  # or already randomized (rr)
        rr_events, hub_labels = [], y_fit
        if rr:  # the label party's one release of its labels; everything after is post-processing
            hub_labels, rr_events = _rr_labels(y_fit, float(self.label_epsilon), nseed, len(blocks),
                                              checkpoint_dir, resume_from)
            notes.append(f"labels: randomized response at label epsilon = {self.label_epsilon:g} (flip probability "
                         f"{vl.flip_probability(self.label_epsilon):.4g}); the coordinator runs on the released labels")
        if label_mode and not rr:
            label_clip = 1.0
            W = vs.label_sensitivity(label_gap=1.0 if loss.name == "logistic" else math.inf, clip=label_clip,
                                     fit_intercept=bool(self.fit_intercept))
            if self.label_epsilon is not None:
                # T rounds make T − 1 releases: the first party step sees the zero inbox, the last hub step releases none
                label_nm = calibrate_noise_multiplier(self.label_epsilon, self.delta, max(max_iter - 1, 1),
                                                      self.accountant)
                sigma_label = label_nm * W
            else:
                sigma_label = float(self.label_noise_scale)
            label_spec = vl.LabelPrivacy(noise_multiplier=label_nm,
                                         noise_scale=None if self.label_epsilon is not None else sigma_label,
                                         clip=label_clip, rounds=max_iter)
        V, V_inf = self._clip(n, rho, sigma_label)
        if private and not paper:
            rel = vs.RELATIONS[self.relation]
            assumptions = [
                {"name": f"what each party receives is clipped: ||v|| <= V = {V:.4g}"
                         + (f", |v_i| <= {V_inf:.4g}" if self.relation == "record" else ""),
                 "status": "enforced", "detail": "clip_share_input in party_step, every round"},
                {"name": "rows of every party block have norm <= 1", "status": "enforced",
                 "detail": "rows clipped at the party (setup_party)"},
                {"name": "ridge x-step, l2 penalty, lambda > 0, no damping, no projection", "status": "checked",
                 "detail": "the sensitivity bound covers the map (party data, everything received) -> message"},
                {"name": f"relation: {rel.description}", "status": "stated",
                 "detail": "sensitivity proved in dpadmm.privacy.mechanisms; checked against worst-case neighbours "
                           "in tests/unit/test_vertical_privacy.py"},
            ]
        lam_run = self._run_lam(n)  # λ of the joint run (stronger on randomized-response labels)
        lam_sum = n * lam_run  # the paper's summed scaling
        damping = (0.0 if (private or mm) else 0.5) if self.damping == "auto" else float(self.damping)
        specs = []
        for m, (name, B) in enumerate(zip(names, blocks)):
            pspec = None
            if private:
                pspec = vs.PrivacySpec(noise_multiplier=nm, noise_scale=self.noise_scale, c1=1.0, bounds=bounds,
                                       n_parties=n_blocks, mechanism=self.mechanism, relation=self.relation,
                                       clip=V, clip_inf=V_inf)
            opts = {"lam_sum": lam_sum, "reg": reg, "private": pspec, "bound": bx, "damping": damping,
                    "solver": self.solver,
                    "eval_blocks": {k: Xe[m] for k, (Xe, _) in evals.items()}}
            if paper and _is_source(B):
                opts["require_unit_rows"] = True
            if m == 0 and refits:
                opts["labels"] = y_fit  # the label party's own (exact) labels (party 1 is the label holder)
            handlers = _LABEL_PARTY_HANDLERS if (m == 0 and refits) else _HANDLERS
            specs.append(PartySpec(name, vs.setup_party, (name, B, opts), vs.party_step, vs.party_diagnostics, owner=name,
                                   handlers=handlers))
        hub_cfg = vs.CoordinatorConfig(
            labels=hub_labels, loss=loss, lam=lam_run, rho=rho,
            party_names=tuple(s.name for s in specs), bounds=bounds, fit_intercept=bool(self.fit_intercept),
            adaptive_rho=bool(self.adaptive_rho),
            tol=float(self.tol), eval_labels={k: yv for k, (_, yv) in evals.items()}, label_privacy=label_spec,
        )
        hub = engine.Hub(hub_cfg, vs.init_coordinator, vs.coordinator_step, vs.coordinator_metrics)
        backend = get_backend(self.backend)
        engine.start(backend, specs, noise_seed=nseed, rounds=max_iter)  # party setup under the engine's BLAS cap
        self.setup_seconds_ = time.perf_counter() - t_fit  # validation + party setup (before round 1)
        # Un-noised party values (local models x_m, eval-set partial scores) reach the driver only in a
        # non-private fit, in the in-process simulation (where the driver holds everything anyway), or
        # when the user opted in with monitor=True (then the report names them).
        collect = (not private) or backend.collects_models or monitor
        if private and monitor:
            notes.append("monitor=True: monitoring values (training objective from the true x_m), local models x_m "
                         "and eval-set partial scores left the parties un-noised; they are NOT covered by the "
                         "guarantee")
        elif private and backend.collects_models:
            notes.append("in-process simulation: the driver holds every party's local model x_m (for predict); in a "
                         "deployment (out-of-process backend) the models stay at the parties")
        try:
            result = engine.run(hub=hub, parties=specs, backend=backend, rounds=max_iter, noise_seed=nseed,
                                callbacks=callbacks, monitor=monitor, stop_on_convergence=not (private or mm),
                                checkpoint_every=checkpoint_every, checkpoint_dir=checkpoint_dir,
                                resume_from=resume_from, started=True, transcript=transcript)
            # a party in another organisation never sends its model (it writes it to its own directory)
            remote = backend.models_stay_at_parties
            self.coefs_ = [backend.request(name, "coef") for name in names] if collect and not remote else None
            self.intercept_ = float(result.hub_state.intercept)
            self.passive_weight_ = 1.0
            self.label_coef_ = None  # the label party's refit block (stays with the label party: for its scoring)
            refit = None
            self.label_party_choice_, self.label_party_cv_ = None, None
            if refits:
                # the label party (which is also the coordinator) refits its own block, the intercept and a weight
                # on the others' shares on its exact labels, and keeps that or its own model (whichever
                # cross-validates better on its rows); the result never goes to a passive party
                # alpha is fitted whenever the shares or the labels the run used were noisy (with no noise at all the
                # protocol is exact and alpha = 1 keeps "zero noise == non-private")
                noisy = private or rr or (label_spec is not None and (sigma_label > 0 or label_nm is not None))
                refit = backend.request(names[0], "refit", result.hub_state.passive_total, loss.name,
                                        bool(self.fit_intercept), self.intercept_, noisy, bool(self.fallback),
                                        float(self.lam), float(self.label_block_scale))
                alpha = refit["passive_weight"]
                self.passive_weight_ = alpha
                self.label_coef_ = np.asarray(refit["coef"])
                self.label_party_choice_, self.label_party_cv_ = refit.get("choice"), refit.get("cv")
                if self.coefs_ is not None:
                    self.coefs_ = [refit["coef"]] + [alpha * c for c in self.coefs_[1:]]
                self.intercept_ = refit["intercept"]
                notes.append(f"the label party's own block, the intercept and a weight alpha = {alpha:.3g} on the other "
                             "parties' partial scores are refit on its exact labels after the last round, given the "
                             "other parties' shares as received; that model stays with the label party")
                if refit.get("cv") is not None:
                    notes.append(f"the label party kept the {refit['choice']} model (5-fold cross-validated loss on its "
                                 f"own rows: joint {refit['cv']['joint']:.4g}, its own model {refit['cv']['alone']:.4g}); "
                                 "the choice stays with the label party")
            if transcript is not None and self.coefs_ is not None:  # x_m collected (simulation or opt-in)
                for name, coef in zip(names, self.coefs_):
                    transcript(result.rounds, name, engine.HUB, {"coef": coef}, "model")
            if paper and collect:
                deficient = []
                for m, name in enumerate(names, start=1):
                    rank, width = backend.request(name, "rank")
                    if rank is not None and rank < width:
                        msg = (f"party {m}'s block has rank {rank} < {width} columns, so (D_m^T D_m)^-1 of "
                               "[Hu, eq. 16] does not exist; its noise is drawn as sigma U_m g in range(D_m) "
                               "(the same distribution whenever D_m has full rank; no regularisation needed)")
                        notes.append(msg)
                        deficient.append(f"party {m}: rank {rank} of {width}")
                if deficient:  # one warning per fit, phrased for the user; the details are in the report's notes
                    warnings.warn(f"linearly dependent columns ({'; '.join(deficient)}; e.g. one-hot groups), so "
                                  "[Hu, eq. 16]'s (D_m^T D_m)^-1 does not exist; its noise is drawn in the range of "
                                  "each party's data instead (the same distribution whenever the inverse exists; "
                                  "see the privacy report's notes).", RankDeficiencyWarning, stacklevel=2)
            # eval scores summed from the parties' partial scores (needed when the driver has no eval features)
            self.eval_scores_ = {}
            # a feature-private fit sends no un-noised partial scores X_m x_m off a party (x_m depends on D_m beyond
            # the noisy shares): only non-private feature sides (label-only fits) score passive parties' eval sets
            for k in (evals if (collect or (refits and not private)) else ()):
                if collect:
                    parts = {name: backend.request(name, "score", k) for name in names}
                else:  # passive parties' partial test scores (prediction), the label party's from its refit
                    parts = {name: backend.request(name, "score", k) for name in names[1:]}
                if refit is not None:
                    parts = {name: refit["passive_weight"] * part for name, part in parts.items()}
                    parts[names[0]] = refit["eval_scores"][k]
                if transcript is not None:
                    for name, part in parts.items():
                        transcript(result.rounds, name, engine.HUB, {f"eval_score.{k}": part}, "prediction")
                self.eval_scores_[k] = sum(parts.values()) + self.intercept_
        finally:
            backend.close()
        self.coef_ = np.concatenate(self.coefs_) if self.coefs_ is not None else None
        self.noise_source_ = result.noise_source
        self.history_ = History(result.history, monitored=monitor, private=any_private)
        self.n_iter_ = result.rounds
        self.converged_ = result.converged
        self.noise_multiplier_ = nm
        self.label_noise_multiplier_ = label_nm
        if rr_events:
            result.ledger.record(rr_events)
        if any_private:
            delta = (result.rounds + 1) * self.delta if mode == "iteration_epsilon" else self.delta
            self.privacy_ = hu_report(
                result.ledger, delta=delta, accountant=self.accountant, rounds=result.rounds,
                paper_delta_iter=self.delta if mode == "iteration_epsilon" else None,
                assumptions=assumptions, notes=notes, mechanism=self.mechanism if private else None,
                relation=self.relation, label_delta=self.delta if label_mode else None)
            finish(self.privacy_, threat_model="vertical-feature" if private and not label_mode else
                   "vertical-label" if not private else
                   THREAT_MODELS["vertical-feature"] + " || label side: " + THREAT_MODELS["vertical-label"],
                   noise_source=result.noise_source)
        else:
            self.privacy_ = None
            if not result.converged and max_iter > 1 and self.tol > 0:
                warnings.warn(f"ADMM did not reach tol={self.tol} in max_iter={max_iter} iterations; "
                              "increase max_iter or use adaptive_rho=True.", ConvergenceWarning, stacklevel=2)
        return self

    # ------------------------------------------------------------------ predict
    def decision_function(self, X) -> np.ndarray:
        """Sum of the parties' partial scores ``X_m x_m`` plus the intercept (distributed prediction)."""
        self._check_fitted()
        blocks = self._blocks(X)
        if any(_is_source(B) for B in blocks):
            raise InvalidDataError("X holds party files read by the parties; pass them as eval_set to fit "
                                   "(scores in eval_scores_) or give arrays to predict.")
        return sum(B @ c for B, c in zip(blocks, self.coefs_)) + self.intercept_

    def _check_fitted(self):
        if not hasattr(self, "coefs_"):
            from sklearn.exceptions import NotFittedError

            raise NotFittedError(f"this {type(self).__name__} is not fitted yet; call fit first.")
        if self.coefs_ is None:
            raise InvalidDataError(
                "the local models stayed at the parties (private fit on an out-of-process backend); score through "
                "eval_set with monitor=True (outside the guarantee) or at the parties themselves.")


class VerticalLogisticRegression(ClassifierMixin, _VerticalADMM):
    """L2-regularised logistic regression over vertically partitioned features by ADMM sharing
    [Hu, Alg. 1], optionally differentially private on the feature side (each party's features,
    ``epsilon``) and on the label side (the training labels, ``label_epsilon``).

    Objective: ``mean_i log(1 + exp(−y_i s_i)) + lam · Σ_m R(x_m)`` with ``s = Σ_m X_m x_m + b``
    (scikit-learn's ``C = 1/(lam · N)``); the intercept b is held by the label party and not penalised.

    Parameters
    ----------
    lam : regularisation weight λ (> 0).
    rho : ADMM penalty ρ in the paper's summed-loss scaling (> 0). ``"auto"``: 0.05 for ADMM; for the
        label-private protocol M·sup ℓ'' (0.5 for two parties and the logistic loss), which makes its
        Jacobi step a majoriser.
    damping : proximal-Jacobi weight τ/ρ of an added ``(τ/2)‖D_m(x − x_m^t)‖²`` (beyond the paper).
        ``"auto"`` = 0.5 for non-private fits (robust when party ranges overlap) and 0 — the paper's
        x-step — for private fits, where any other value is refused.
    max_iter : rounds T (under DP, exactly the T the budgets are composed over). ``"auto"``: 100 ADMM
        iterations (also with randomized-response labels), 3 rounds of the Gaussian label-private protocol
        (2 label releases), 2 when the features are protected.
    tol : primal/dual residual tolerance (non-private runs stop early when both are below it).
    penalty : ``l2`` (needed for DP), ``l1`` or ``elasticnet`` (with ``l1_ratio``).
    epsilon, delta : feature-side total (ε, δ) budget of the run; σ is calibrated with the accountant
        so the T-fold composition spends at most ε at δ. ``delta`` is also the label side's δ.
    iteration_epsilon : per-iteration ε of [Hu, Thm 3] (δ is then per iteration), as the paper does.
    noise_scale : raw σ of the shared noise (the accountant reports what it costs).
    mechanism : feature-side mechanism. ``"gaussian"`` (default): clipped input, exact ridge x-step,
        isotropic N(0, σ² I_N) on the released share, sensitivity proved per ``relation``.
        ``"paper"``: [Hu, eq. 16] as published, for reproducing the paper only — its noise lies in
        range(D_m), so it is not DP and the report gives ε = ∞ with the reason.
    relation : neighbouring relation of the feature side: ``"feature_column"`` (one column of one
        party changes by ≤ 1 in ℓ2, [Hu, Definition 2]) or ``"record"`` (one row of one party).
    clip : per-sample scale c of the clip on what a party receives (V = c·sqrt(N), V_∞ = 3c);
        ``"auto"``: ``sqrt(1 + σ_L²) + 3ρ``.
    label_epsilon : label-side total ε: everything the coordinator sends any party is ε_L-DP (pure, with
        ``label_mechanism="rr"``; (ε_L, δ) with ``"gaussian"``) w.r.t. one training label changing.
        Without it, every party can read the training labels from the dual y it receives.
    label_mechanism : ``"rr"`` (default): the label party releases its labels once by randomized
        response (flip probability 1/(1 + e^ε_L)) and ADMM runs on them to convergence (post-processing:
        the rounds are free); ``"gaussian"``: the linearised coordinator adds Gaussian noise to the loss
        gradient it sends every round (:mod:`dpadmm.algorithms.vertical_label`).
    fallback : after a label-private (or feature-private) fit the label party refits its block, the
        intercept and a weight α on the others' shares on its exact labels, and — with ``fallback=True``
        (default) — keeps that model or its own (its block alone), whichever has the lower 5-fold
        cross-validated loss on its own rows: never worse than the label party alone, within the noise
        of that choice. The choice costs no privacy and stays with the label party
        (``label_party_choice_``, ``label_party_cv_``).
    label_block_scale : the factor c by which the label party's block was scaled in its DP preparation
        (1/R after clipping standardised rows at R, as ``dpadmm vertical --prepare standardize`` does
        under ``--epsilon``); its refit and its own model use the ridge λ·c², i.e. λ on the unscaled
        block. Default 1.
    label_noise_scale : raw σ_L of the Gaussian label mechanism instead of a budget (selects that mechanism).
    bound : b_1 of [Hu, Assumption 2.1] (``mechanism="paper"`` only); iterates are projected onto it.
        ``"auto"`` = sqrt(2 ln 2/λ) for x, 3·sqrt(N) for y and z.
    accountant : ``pld`` (headline) or ``rdp``.
    party_sizes : column counts when X is one matrix.
    random_state : int, Generator or None — the root of every party's noise stream.
    backend : ``inprocess`` (default) or a Backend instance.
    monitor : record objective and eval losses each iteration (simulation diagnostics).
    solver : x-step solver of every party: ``"eigh"`` (one eigendecomposition of D_mᵀD_m, exact,
        O(d_m³) setup and O(d_m²) memory), ``"cg"`` (warm-started preconditioned conjugate gradients
        with D_m and D_mᵀ only, O(nnz) per product and no d_m × d_m matrix; inexact steps in
        non-private fits, solved to 1e-10 in private ones) or ``"auto"`` (eigh for blocks of at most
        2,048 columns — 512 if sparse — else cg). Sparse (CSR) blocks stay sparse with either.

    Attributes
    ----------
    coefs_ : list of per-party coefficient vectors (each stays with its party in a deployment).
    coef_, intercept_, classes_, n_iter_, history_, privacy_ (a PrivacyReport or None),
    setup_seconds_ (validation and party setup before round 1; training time is ``history_["seconds"]``).
    """

    _loss_name = "logistic"

    def _encode_y(self, y, n, fitted: bool = False):
        if fitted:
            arr = np.asarray(y).ravel()
            if arr.shape[0] != n:
                raise InvalidDataError(f"eval labels have {arr.shape[0]} entries but the features have {n} rows.")
            unknown = ~np.isin(arr, self._classes_fit)
            if unknown.any():
                raise InvalidDataError(f"eval labels contain {arr[unknown][0]!r}, not one of the training classes "
                                       f"{list(self._classes_fit)}.")
            return np.where(arr == self._classes_fit[1], 1.0, -1.0)
        y_pm, classes = binary_labels("y", y, n)
        self._classes_fit = classes
        self.classes_ = classes
        return y_pm

    def predict_proba(self, X) -> np.ndarray:
        s = self.decision_function(X)
        p = 1.0 / (1.0 + np.exp(-np.clip(s, -500, 500)))
        return np.column_stack([1.0 - p, p])

    def predict(self, X) -> np.ndarray:
        return self.classes_[(self.decision_function(X) > 0).astype(int)]

    def evaluate(self, X, y) -> dict:
        """Log loss, accuracy and ROC AUC on (X, y)."""
        p = self.predict_proba(X)[:, 1]
        y = np.asarray(y).ravel()
        return {"log_loss": float(log_loss(y, p, labels=self.classes_)),
                "accuracy": float(np.mean(self.predict(X) == y)),
                "auc": float(roc_auc_score(y == self.classes_[1], p))}


class VerticalLinearRegression(RegressorMixin, _VerticalADMM):
    """Ridge-type regression (``loss='squared'`` or ``'huber'``) over vertically partitioned features
    by ADMM sharing [Hu, Alg. 1]; same parameters as :class:`VerticalLogisticRegression` plus ``loss``."""

    def __init__(self, *, loss: str = "squared", lam: float = 1e-3, rho="auto", max_iter="auto",
                 tol: float = 1e-6, fit_intercept: bool = True, penalty: str = "l2", l1_ratio: float = 0.5,
                 adaptive_rho: bool = False, damping="auto", epsilon=None, delta: float = 1e-5, iteration_epsilon=None,
                 noise_scale=None, mechanism: str = "gaussian", relation: str = "feature_column", clip="auto",
                 label_epsilon=None, label_noise_scale=None, label_mechanism: str = "gaussian", fallback: bool = True,
                 label_block_scale: float = 1.0,
                 bound="auto", accountant: str = "pld", party_sizes=None,
                 random_state=None, backend="inprocess", monitor: bool | None = None, solver: str = "auto"):
        super().__init__(lam=lam, rho=rho, max_iter=max_iter, tol=tol, fit_intercept=fit_intercept, penalty=penalty,
                         l1_ratio=l1_ratio, adaptive_rho=adaptive_rho, damping=damping, epsilon=epsilon, delta=delta,
                         iteration_epsilon=iteration_epsilon, noise_scale=noise_scale, mechanism=mechanism,
                         relation=relation, clip=clip, label_epsilon=label_epsilon,
                         label_noise_scale=label_noise_scale, label_mechanism=label_mechanism, fallback=fallback,
                         label_block_scale=label_block_scale,
                         bound=bound,
                         accountant=accountant, party_sizes=party_sizes, random_state=random_state,
                         backend=backend, monitor=monitor, solver=solver)
        self.loss = loss

    @property
    def _loss_name(self):  # type: ignore[override]
        return check_choice("loss", self.loss, ("squared", "huber"))

    def _encode_y(self, y, n, fitted: bool = False):
        return as_vector("y", y, n)

    def predict(self, X) -> np.ndarray:
        return self.decision_function(X)


#: moved by concern (:mod:`.vertical_sgd`, :mod:`.vertical_audit`); still importable from here
_MOVED = {"VerticalSGDClassifier": "vertical_sgd", "audit_fit": "vertical_audit"}


def __getattr__(name: str):
    if name in _MOVED:
        import importlib

        return getattr(importlib.import_module(f".{_MOVED[name]}", __package__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
