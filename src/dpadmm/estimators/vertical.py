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
from .._validation import (
    as_float_matrix, as_vector, binary_labels, check_choice, check_int, check_open_unit, check_positive,
    noise_seed,
)
from ..algorithms import vertical_sharing as vs
from ..backends import PartySpec, get_backend
from ..data.parties import row_norms
from ..exceptions import InvalidDataError, InvalidParameterError, PrivacyPreconditionError
from ..kernels.linalg import SOLVERS
from ..kernels.losses import get_loss
from ..kernels.regularizers import get_regularizer
from ..privacy.accountants import ACCOUNTANTS, calibrate_noise_multiplier
from ..privacy.reports import hu_report
from ..privacy.threats import THREAT_MODELS, finish
from .._history import History

def _is_source(block) -> bool:
    """A party block read by the party's own worker (has ``load`` and ``shape``), e.g. a PartyFile."""
    return hasattr(block, "load") and hasattr(block, "shape")


class RankDeficiencyWarning(UserWarning):
    """A party block is not of full column rank (handled exactly; see the message)."""


#: the requests a vertical party answers besides its protocol step (declared, nothing else runs)
_HANDLERS = {"coef": vs.party_coef, "rank": vs.party_rank, "score": vs.eval_score}
#: the label party also answers the exact refit of its own block after a label-private run
_LABEL_PARTY_HANDLERS = dict(_HANDLERS, refit=vs.refit_label_block)


def _party_names(n: int) -> list[str]:
    return [f"party{m}" for m in range(1, n + 1)]


class _VerticalADMM(BaseEstimator):
    """Shared implementation; see :class:`VerticalLogisticRegression` for the parameters."""

    _loss_name = "logistic"

    def __init__(self, *, lam: float = 1e-3, rho: float | str = "auto", max_iter: int | str = "auto", tol: float = 1e-6,
                 fit_intercept: bool = True, penalty: str = "l2", l1_ratio: float = 0.5,
                 adaptive_rho: bool = False, damping: float | str = "auto", epsilon: float | None = None, delta: float = 1e-5,
                 iteration_epsilon: float | None = None, noise_scale: float | None = None,
                 mechanism: str = "gaussian", relation: str = "feature_column", clip: float | str = "auto",
                 label_epsilon: float | None = None, label_noise_scale: float | None = None,
                 bound: float | str = "auto", accountant: str = "pld", party_sizes: Sequence[int] | None = None,
                 random_state: Any = None, backend: Any = "inprocess", monitor: bool | None = None,
                 solver: str = "auto"):
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

    # ------------------------------------------------------------------ input handling
    def _blocks(self, X, name: str = "X") -> list[np.ndarray]:
        if isinstance(X, (list, tuple)):
            if len(X) == 0:
                raise InvalidDataError(f"{name} is an empty list of party blocks; give one block per party.")
            # arrays, or sources the parties read themselves (dpadmm.data.remote.PartyFile)
            blocks = [B if _is_source(B) else as_float_matrix(f"{name} block {m + 1}", B, accept_sparse=True)
                      for m, B in enumerate(X)]
            n = blocks[0].shape[0]
            for m, B in enumerate(blocks[1:], start=2):
                if B.shape[0] != n:
                    raise InvalidDataError(f"party blocks must have the same rows: block 1 has {n}, block {m} has "
                                           f"{B.shape[0]}; align the parties on the same samples.")
        else:
            A = as_float_matrix(name, X, accept_sparse=True)  # sparse stays CSR
            sizes = self.party_sizes if self.party_sizes is not None else [A.shape[1]]
            from ..data.parties import partition_columns
            blocks = partition_columns(A, sizes)
        if hasattr(self, "party_dims_"):
            dims = tuple(B.shape[1] for B in blocks)
            if dims != self.party_dims_:
                raise InvalidDataError(f"{name} has party widths {dims} but the model was fitted with "
                                       f"{self.party_dims_}; give the same party blocks.")
        return blocks

    def _bounds(self, n: int, n_parties: int, loss) -> "vs.Bounds":
        """Radii of [Hu, Assumption 2.1] (enforced by projection whenever DP is on).

        A number b gives the paper's single b_1 = b for x, y and z. ``"auto"``:
        ``b_x = sqrt(2 ℓ(0)/λ)`` (the regularised optimum satisfies λ/2‖x*‖² ≤ mean ℓ(0); for the
        logistic loss ℓ(0) = ln 2; used for the logistic loss only, else 3√N), and
        ``b_y = b_z = 3√N`` (scores and summed-loss duals of magnitude ≤ 3 on average).
        """
        if self.bound not in ("auto", None):
            b = float(self.bound)
            return vs.Bounds(b, b, b)
        big = 3.0 * math.sqrt(n)
        bx = math.sqrt(2.0 * math.log(2.0) / float(self.lam)) if loss.name == "logistic" else big
        return vs.Bounds(bx, big, big)

    def _privacy_mode(self) -> str | None:
        given = [k for k in ("epsilon", "iteration_epsilon", "noise_scale") if getattr(self, k) is not None]
        if len(given) > 1:
            raise InvalidParameterError(f"give at most one of epsilon, iteration_epsilon, noise_scale; got {given}.")
        return given[0] if given else None

    def _label_mode(self) -> bool:
        if self.label_epsilon is not None and self.label_noise_scale is not None:
            raise InvalidParameterError("give at most one of label_epsilon, label_noise_scale; got both.")
        return self.label_epsilon is not None or self.label_noise_scale is not None

    def _mm_protocol(self) -> bool:
        """Private fits (label side, or the gaussian feature mechanism) run the linearised coordinator
        (few rounds: each costs budget) with the label party's refit; ADMM otherwise and for
        ``mechanism="paper"`` (the reproduction of [Hu])."""
        feature = any(getattr(self, k) is not None for k in ("epsilon", "iteration_epsilon", "noise_scale"))
        return self._label_mode() or (feature and self.mechanism == "gaussian")

    def _rho(self, n_blocks: int, loss) -> float:
        """``"auto"``: 0.05 for ADMM; M · sup ℓ'' for the label-private protocol (the Jacobi
        majoriser of M blocks: ‖Σ_m D_m δ_m‖² ≤ M Σ_m ‖D_m δ_m‖²)."""
        if self.rho != "auto":
            return float(self.rho)
        return n_blocks * loss.hess_bound if self._mm_protocol() else 0.05

    def _max_iter(self) -> int:
        """``"auto"``: 100 ADMM iterations; for the private protocol, 3 rounds when only the labels are
        protected (two label releases: round 1's party step sees the zero inbox and round T's hub step
        releases nothing) and 2 when the features are (one costly share per party: round 1's share of
        the zero inbox is 0 and costs nothing; later shares would feed the party's own noise back).
        Each release costs budget; the label party's exact refit does the rest."""
        if self.max_iter != "auto":
            return int(self.max_iter)
        if not self._mm_protocol():
            return 100
        feature = any(getattr(self, k) is not None for k in ("epsilon", "iteration_epsilon", "noise_scale"))
        return 2 if feature else 3

    def _clip(self, n: int, rho: float, sigma_label: float) -> tuple[float, float]:
        """(V, V_∞) of the gaussian mechanism. ``"auto"``: per-sample scale ``c = sqrt(1 + σ_L²) + 3ρ``
        (|y_i| ≤ 1 for the logistic dual, shares of magnitude ≲ 3 per sample, plus the label noise the
        party receives), ``V = c·sqrt(N)``, ``V_∞ = 3c``. A number c gives the same with that c.
        V depends on nothing private (N is public)."""
        c = float(self.clip) if self.clip != "auto" else math.sqrt(1.0 + sigma_label ** 2) + 3.0 * rho
        return c * math.sqrt(n), 3.0 * c

    def _validate(self):
        check_positive("lam", self.lam, allow_zero=self.penalty == "l2" and False)
        if self.rho != "auto":
            check_positive("rho", self.rho)
        if self.max_iter != "auto":
            check_int("max_iter", self.max_iter)
        check_choice("mechanism", self.mechanism, vs.MECHANISMS)
        check_choice("relation", self.relation, tuple(vs.RELATIONS))
        if self.clip != "auto":
            check_positive("clip", self.clip)
        if self._mm_protocol():
            if self.label_epsilon is not None:
                check_positive("label_epsilon", self.label_epsilon)
            elif self.label_noise_scale is not None:
                check_positive("label_noise_scale", self.label_noise_scale, allow_zero=True)
            if self.adaptive_rho:
                raise InvalidParameterError("adaptive_rho applies to ADMM; the label-private protocol uses a fixed "
                                            "rho (set adaptive_rho=False).")
            if self.penalty != "l2":
                raise PrivacyPreconditionError(f"penalty={self.penalty!r}: the label-private protocol needs "
                                               "penalty='l2'.")
        check_positive("tol", self.tol, allow_zero=True)
        check_choice("accountant", self.accountant, ACCOUNTANTS)
        check_choice("penalty", self.penalty, ("l2", "l1", "elasticnet"))
        check_choice("solver", self.solver, SOLVERS)
        mode = self._privacy_mode()
        if mode == "epsilon":
            check_positive("epsilon", self.epsilon)
        elif mode == "iteration_epsilon":
            check_positive("iteration_epsilon", self.iteration_epsilon)
        elif mode == "noise_scale":
            check_positive("noise_scale", self.noise_scale, allow_zero=True)
        check_open_unit("delta", self.delta)
        if not (self.bound == "auto" or self.bound is None):
            check_positive("bound", self.bound)
        if self.damping != "auto":
            check_positive("damping", self.damping, allow_zero=True)
            if (mode is not None or self._label_mode()) and self.damping > 0:
                raise PrivacyPreconditionError(
                    f"damping={self.damping} changes the x-step the sensitivity bound covers; use damping=0 "
                    "(or 'auto') for a private fit.")
        return mode

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
        if mm and not label_mode:  # feature-private fit: the linearised coordinator, labels unprotected
            label_spec = vs.LabelPrivacy(noise_scale=0.0, rounds=max_iter)
        if label_mode:
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
            label_spec = vs.LabelPrivacy(noise_multiplier=label_nm,
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
                           "in tests/test_vertical_privacy.py"},
            ]
        lam_sum = n * float(self.lam)  # the paper's summed scaling
        damping = (0.0 if (any_private or mm) else 0.5) if self.damping == "auto" else float(self.damping)
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
            if m == 0 and mm:
                opts["labels"] = y_fit  # the label party's own labels (party 1 is the label holder)
            handlers = _LABEL_PARTY_HANDLERS if (m == 0 and mm) else _HANDLERS
            specs.append(PartySpec(name, vs.setup_party, (name, B, opts), vs.party_step, vs.party_diagnostics, owner=name,
                                   handlers=handlers))
        hub_cfg = vs.CoordinatorConfig(
            labels=y_fit, loss=loss, lam=float(self.lam), rho=rho,
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
                                callbacks=callbacks, monitor=monitor, stop_on_convergence=not any_private,
                                checkpoint_every=checkpoint_every, checkpoint_dir=checkpoint_dir,
                                resume_from=resume_from, started=True, transcript=transcript)
            # a party in another organisation never sends its model (it writes it to its own directory)
            remote = getattr(backend, "models_stay_at_parties", False)
            self.coefs_ = [backend.request(name, "coef") for name in names] if collect and not remote else None
            self.intercept_ = float(result.hub_state.intercept)
            self.passive_weight_ = 1.0
            refit = None
            if mm:
                # the label party (which is also the coordinator) refits its own block and intercept on its exact
                # labels, given the other parties' last shares; the result never goes to a passive party
                refit = backend.request(names[0], "refit", result.hub_state.passive_total, loss.name,
                                        bool(self.fit_intercept), self.intercept_, private)
                alpha = refit["passive_weight"]
                self.passive_weight_ = alpha
                if self.coefs_ is not None:
                    self.coefs_ = [refit["coef"]] + [alpha * c for c in self.coefs_[1:]]
                self.intercept_ = refit["intercept"]
                notes.append("the label party's own block and the intercept"
                             + (f" and a weight alpha = {alpha:.3g} on the other parties' (noisy) partial scores"
                                if private else "")
                             + " are refit on the exact labels after the last round, given the other parties' shares "
                             "as received; that model stays with the label party")
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
            for k in (evals if (collect or (mm and not private)) else ()):
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

    def _eval_sets(self, eval_set) -> dict:
        if eval_set is None:
            return {}
        if isinstance(eval_set, dict):
            items = list(eval_set.items())
        else:
            items = [("test" if i == 0 else f"eval{i}", pair) for i, pair in enumerate(eval_set)]
        out = {}
        for name, (Xe, ye) in items:
            blocks = self._blocks(Xe, f"eval_set[{name!r}]")
            out[name] = (blocks, self._encode_y(ye, blocks[0].shape[0], fitted=True))
        return out

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
        iterations, 3 rounds of the label-private protocol (2 label releases).
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
    label_epsilon : label-side total ε (at ``delta``): every message the coordinator sends any party is
        (ε_L, δ)-DP w.r.t. one training label changing. Switches the coordinator to the label-private
        protocol. Without it, every party can read the training labels from the dual y it receives.
    label_noise_scale : raw σ_L of the label side instead of a budget.
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
                 label_epsilon=None, label_noise_scale=None, bound="auto", accountant: str = "pld", party_sizes=None,
                 random_state=None, backend="inprocess", monitor: bool | None = None, solver: str = "auto"):
        super().__init__(lam=lam, rho=rho, max_iter=max_iter, tol=tol, fit_intercept=fit_intercept, penalty=penalty,
                         l1_ratio=l1_ratio, adaptive_rho=adaptive_rho, damping=damping, epsilon=epsilon, delta=delta,
                         iteration_epsilon=iteration_epsilon, noise_scale=noise_scale, mechanism=mechanism,
                         relation=relation, clip=clip, label_epsilon=label_epsilon,
                         label_noise_scale=label_noise_scale, bound=bound,
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


class VerticalSGDClassifier(ClassifierMixin, BaseEstimator):
    """The SGD-based vertical baseline [Hu, §5]: per-party linear models, outputs summed, minibatch
    SGD driven by the coordinator's shared residual (see :mod:`dpadmm.algorithms.vertical_sgd`).
    Non-private; monitoring (``history_``) is recorded once per epoch."""

    def __init__(self, *, lam: float = 1e-3, lr: float = 0.5, batch_size: int = 256, epochs: int = 10,
                 decay: float = 0.0, random_state: Any = None, backend: Any = "inprocess"):
        self.lam = lam
        self.lr = lr
        self.batch_size = batch_size
        self.epochs = epochs
        self.decay = decay
        self.random_state = random_state
        self.backend = backend

    def fit(self, X, y, *, eval_set=None, callbacks=()):
        from ..algorithms import vertical_sgd as sgd

        check_positive("lam", self.lam, allow_zero=True)
        check_positive("lr", self.lr)
        check_int("batch_size", self.batch_size)
        check_int("epochs", self.epochs)
        helper = _VerticalADMM()
        blocks = helper._blocks(X)
        n = blocks[0].shape[0]
        y_pm, self.classes_ = binary_labels("y", y, n)
        evals = {}
        for k, (Xe, ye) in (eval_set or {}).items():
            be = helper._blocks(Xe, f"eval_set[{k!r}]")
            evals[k] = (be, np.where(np.asarray(ye).ravel() == self.classes_[1], 1.0, -1.0))
        names = _party_names(len(blocks))
        specs = [PartySpec(name, sgd.setup_party, (name, B, {"lam": float(self.lam),
                                                              "eval_blocks": {k: Xe[m] for k, (Xe, _) in evals.items()}}),
                           sgd.party_step, sgd.party_diagnostics, handlers={"coef": vs.party_coef})
                 for m, (name, B) in enumerate(zip(names, blocks))]
        per_epoch = sgd.rounds_per_epoch(n, int(self.batch_size))
        hub_cfg = sgd.SGDHubConfig(labels=y_pm, loss=get_loss("logistic"), lam=float(self.lam), lr=float(self.lr),
                                   batch_size=int(self.batch_size), party_names=tuple(names), decay=float(self.decay),
                                   eval_labels={k: v for k, (_, v) in evals.items()})
        hub = engine.Hub(hub_cfg, sgd.init_hub, sgd.hub_step, sgd.hub_metrics, metrics_every=per_epoch)
        backend = get_backend(self.backend)
        nseed = noise_seed(self.random_state)
        backend.start(specs, noise_seed=nseed)
        try:
            res = engine.run(hub=hub, parties=specs, backend=backend, rounds=per_epoch * int(self.epochs),
                             noise_seed=nseed, callbacks=callbacks, started=True)
            self.coefs_ = [backend.request(nm, "coef") for nm in names]  # non-private baseline
        finally:
            backend.close()
        self.party_dims_ = tuple(B.shape[1] for B in blocks)
        # keep only monitored rounds (once per epoch)
        self.history_ = {k: v for k, v in res.history.items() if k not in ("round", "seconds")}
        self.history_["seconds"] = [s for s, r in zip(res.history["seconds"], res.history["round"]) if r % per_epoch == 0]
        self.intercept_ = 0.0
        return self

    def decision_function(self, X):
        blocks = _VerticalADMM()._blocks(X)
        return sum(B @ c for B, c in zip(blocks, self.coefs_))

    def predict_proba(self, X):
        p = 1.0 / (1.0 + np.exp(-np.clip(self.decision_function(X), -500, 500)))
        return np.column_stack([1.0 - p, p])

    def predict(self, X):
        return self.classes_[(self.decision_function(X) > 0).astype(int)]


# ----------------------------------------------------------------------------- for the end-to-end audit
class _Seen:
    """Transcript callable keeping exactly what the adversary of one side sees."""

    def __init__(self, side: str, party: str):
        self.side, self.party, self.parts = side, party, []

    def __call__(self, round_, sender, receiver, message, kind):
        if kind != "protocol":
            return
        if self.side == "feature" and sender == self.party:  # every share party m sends
            self.parts.append(np.asarray(message.share, dtype=np.float64))
        elif self.side == "label" and receiver == self.party:  # every N-vector the coordinator sends it
            self.parts.extend(np.asarray(v, dtype=np.float64) for v in (message.residual, message.dual))


def audit_fit(blocks, y, *, side: str = "feature", relation: str = "feature_column", epsilon: float = 1.0,
              delta: float = 1e-5, party: str = "party2", seed: int | None = None, **kwargs) -> tuple[np.ndarray, float]:
    """One whole private fit on a small instance, for the end-to-end audit (``dpadmm audit --end-to-end``).

    ``side="feature"``: a feature-private fit (gaussian mechanism, ``relation``, total ``epsilon``);
    returns everything ``party`` sends, concatenated (what the coordinator and the other parties see).
    ``side="label"``: a label-private fit (``label_epsilon=epsilon``); returns everything the coordinator
    sends ``party`` (what a passive party sees). Second value: the ε the fit reports for that side
    (the claim the audit's lower bound must not exceed). ``kwargs`` go to the estimator (e.g.
    ``max_iter``, ``lam``, ``mechanism="paper"`` for the published [Hu, eq. 16]). Neighbours: change one
    column (or row) of ``party``'s block, or flip one label, and call again. Example::

        view, eps = audit_fit([B1, B2], y, side="label", epsilon=1.0, max_iter=3, seed=k)
    """
    seen = _Seen(side, party)
    if side == "feature":
        model = VerticalLogisticRegression(epsilon=epsilon, delta=delta, relation=relation, random_state=seed,
                                           monitor=False, **kwargs)
    elif side == "label":
        model = VerticalLogisticRegression(label_epsilon=epsilon, delta=delta, random_state=seed, monitor=False,
                                           **kwargs)
    else:
        raise InvalidParameterError(f"side must be 'feature' or 'label', got side={side!r}.")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(blocks, y, transcript=seen)
    p = model.privacy_
    claim = p.epsilon if side == "feature" else p.label["epsilon"]
    return np.concatenate(seen.parts), float(claim)
