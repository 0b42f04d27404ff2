"""The driver of vertical ADMM sharing [Hu, Alg. 1]: parameters → noise calibration → typed party setups → the fit
runner → the requests after training (local models, the label party's refit, ranks, eval scores) → the privacy
report.

:func:`fit` takes the checked parameters (:class:`~dpadmm.algorithms.vertical.params.VerticalParams`), the data
(:class:`VerticalData`: the party blocks, the encoded labels, the eval sets) and a backend, and returns a
:class:`FitResult` the estimator turns into its attributes. The budgets become noise here and nowhere else (ε → σ
of the feature shares and of the label mechanism, ε → the randomized response's release); the accounting is
:func:`dpadmm.algorithms.vertical.report.vertical_run_report`'s. It runs the protocol on a backend through the one fit
runner (:mod:`dpadmm.fit.runner`), so it sits above the rest of this folder: nothing in the folder imports it.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from ... import engine
from ..._history import History
from ..._validation import noise_seed
from ...backends import PartySpec, get_backend
from ...backends.base import party_rng
from ...data.parties import row_norms
from ...exceptions import PrivacyPreconditionError
from ...fit import runner
from ...kernels.losses import get_loss
from ...kernels.regularizers import get_regularizer
from ...privacy.accountants import calibrate_noise_multiplier
from ...privacy.events import LABEL_CHANGE, PureDPRelease
from ...privacy.ledger import PrivacyReport
from . import coordinator as vertical_coordinator, label as vertical_label, messages as vertical_messages
from . import party as vertical_party
from .coordinator import coordinator_converged
from .messages import Setup, VerticalOptions
from .params import VerticalParams
from .protocol import PROTOCOL
from .report import gaussian_assumptions, paper_assumptions, vertical_run_report


class RankDeficiencyWarning(UserWarning):
    """A party block is not of full column rank (handled exactly; see the message)."""


#: the requests a vertical party answers besides its protocol step (declared, nothing else runs)
HANDLERS = {"coef": vertical_party.party_coef, "rank": vertical_party.party_rank, "score": vertical_party.eval_score}
#: the label party also answers the exact refit of its own block after a label-private run
LABEL_PARTY_HANDLERS = dict(HANDLERS, refit=vertical_label.refit_label_block)


def is_source(block) -> bool:
    """A party block read by the party's own worker (has ``load`` and ``shape``), e.g. a PartyFile."""
    return hasattr(block, "load") and hasattr(block, "shape")


def party_names(n: int) -> list[str]:
    return [f"party{m}" for m in range(1, n + 1)]


def rr_labels(y, epsilon: float, nseed, n_parties: int, checkpoint_dir, resume_from):
    """The label party's randomized-response release (drawn once per run: a resumed run reuses the
    release stored in the label party's own checkpoint directory, so resuming never releases twice)."""
    if resume_from is not None and (Path(resume_from) / "rr_labels.npy").is_file():
        return np.load(Path(resume_from) / "rr_labels.npy"), [PureDPRelease("coordinator", 0, epsilon, LABEL_CHANGE)]
    rng = np.random.default_rng() if nseed is None else party_rng(nseed, n_parties + 1, 0)
    y_rr, events = vertical_label.randomized_response(y, epsilon, rng=rng)
    if checkpoint_dir is not None:
        Path(checkpoint_dir).mkdir(parents=True, exist_ok=True)
        np.save(Path(checkpoint_dir) / "rr_labels.npy", y_rr)
    return y_rr, events


class VerticalData(NamedTuple):
    """A fit's data: the party blocks (rows aligned; block 0 the label party's; arrays or sources the parties read
    themselves), the labels encoded for the loss (±1 for the logistic loss) and the eval sets
    ``{name: (blocks, encoded labels)}``."""

    blocks: list
    labels: np.ndarray
    evals: dict = {}


@dataclass
class FitResult:
    """What one fit returns (the estimator's attributes of the same names, with a trailing underscore): the fitted
    model (``coefs`` — None when the local models stayed at the parties — the intercept, the label party's refit),
    the history and the privacy report (None for a non-private fit)."""

    party_dims: tuple
    coefs: list | None
    intercept: float
    passive_weight: float
    label_coef: np.ndarray | None
    label_party_choice: str | None
    label_party_cv: dict | None
    eval_scores: dict
    noise_source: str
    history: History
    n_iter: int
    converged: bool
    noise_multiplier: float | None
    label_noise_multiplier: float | None
    privacy: PrivacyReport | None
    setup_seconds: float


@dataclass
class _Noise:
    """The calibrated noise of a run: the feature side's multiplier, the label side's (multiplier, σ_L), the
    coordinator's label mechanism and the randomized-response release (events, labels the hub runs on)."""

    nm: float | None
    label_nm: float | None
    sigma_label: float
    label_spec: Any
    rr_events: list
    hub_labels: np.ndarray


def _check_paper_rows(blocks) -> None:
    for m, B in enumerate(blocks, start=1):
        if is_source(B):
            continue  # checked by the party at setup (require_unit_rows)
        norms = row_norms(B)
        if np.any(np.abs(norms[norms > 0] - 1.0) > 1e-6):
            raise PrivacyPreconditionError(
                f"rows of party {m} are not unit-norm (max ||row||_2 = {norms.max():.4g}), which "
                "[Hu, Assumption 2.3] needs; normalise them (dpadmm.data.normalize_rows or "
                "--normalize-rows) before a private fit.")


def _calibrate(p: VerticalParams, *, loss, max_iter: int, y_fit, nseed, n_blocks: int, checkpoint_dir, resume_from,
               notes: list) -> _Noise:
    """Noise multipliers of both sides from the budgets, and the label party's randomized response (rr)."""
    mode, mm, rr, label_mode = p.mode, p.mm, p.rr, p.label_mode
    nm = None
    if mode == "epsilon":
        # the private protocol's first share answers the zero inbox: sensitivity 0, no cost
        costly = max(max_iter - 1, 1) if mm else max_iter
        nm = calibrate_noise_multiplier(p.epsilon, p.delta, costly, p.accountant)
    elif mode == "iteration_epsilon":
        nm = math.sqrt(2.0 * math.log(1.25 / p.delta)) / p.iteration_epsilon  # [Hu, Thm 3]
    label_nm = None
    label_spec = None
    sigma_label = 0.0
    if mm and (rr or not label_mode):  # the linearised coordinator without label noise: labels unprotected,
        label_spec = vertical_messages.LabelPrivacy(noise_scale=0.0, rounds=max_iter)  # or already randomized (rr)
    rr_events, hub_labels = [], y_fit
    if rr:  # the label party's one release of its labels; everything after is post-processing
        hub_labels, rr_events = rr_labels(y_fit, float(p.label_epsilon), nseed, n_blocks, checkpoint_dir,
                                          resume_from)
        notes.append(f"labels: randomized response at label epsilon = {p.label_epsilon:g} (flip probability "
                     f"{vertical_label.flip_probability(p.label_epsilon):.4g}); the coordinator runs on the released labels")
    if label_mode and not rr:
        label_clip = 1.0
        W = vertical_messages.label_sensitivity(label_gap=1.0 if loss.name == "logistic" else math.inf, clip=label_clip,
                                 fit_intercept=bool(p.fit_intercept))
        if p.label_epsilon is not None:
            # T rounds make T − 1 releases: the first party step sees the zero inbox, the last hub step releases none
            label_nm = calibrate_noise_multiplier(p.label_epsilon, p.delta, max(max_iter - 1, 1), p.accountant)
            sigma_label = label_nm * W
        else:
            sigma_label = float(p.label_noise_scale)
        label_spec = vertical_messages.LabelPrivacy(noise_multiplier=label_nm,
                                     noise_scale=None if p.label_epsilon is not None else sigma_label,
                                     clip=label_clip, rounds=max_iter)
    return _Noise(nm, label_nm, sigma_label, label_spec, rr_events, hub_labels)


def fit(p: VerticalParams, data: VerticalData, backend: Any = "inprocess", *, callbacks: Sequence[Callable] = (),
        checkpoint_dir=None, checkpoint_every=None, resume_from=None, transcript=None,
        started_at: float | None = None) -> FitResult:
    """One fit by distributed ADMM sharing with parameters ``p`` on ``data`` over ``backend`` (a Backend or its name);
    see :meth:`dpadmm.estimators.VerticalLogisticRegression.fit` for the keyword arguments. ``started_at``: the
    :func:`time.perf_counter` reading the setup time (``FitResult.setup_seconds``) counts from (default: now)."""
    t_fit = time.perf_counter() if started_at is None else started_at
    mode, label_mode, mm, rr, refits = p.mode, p.label_mode, p.mm, p.rr, p.refits
    blocks, y_fit, evals = list(data.blocks), data.labels, dict(data.evals)
    n = blocks[0].shape[0]
    loss = get_loss(p.loss)
    reg = get_regularizer(p.penalty, p.l1_ratio)
    names = party_names(len(blocks))
    party_dims = tuple(B.shape[1] for B in blocks)
    private = mode is not None  # the feature side
    paper = private and p.mechanism == "paper"
    any_private = private or label_mode
    rho = p.run_rho(len(blocks), loss)
    max_iter = p.rounds()
    bx = bounds = None
    assumptions, notes = [], []
    if private and (not reg.smooth or (not paper and p.penalty != "l2")):
        raise PrivacyPreconditionError(
            f"penalty={p.penalty!r}: a private fit needs penalty='l2' (the ridge x-step the sensitivity "
            "bound is proved for; [Hu, Assumption 2.2] for mechanism='paper').")
    if paper:
        _check_paper_rows(blocks)
        bounds = p.bounds(n, loss)
        bx = bounds.x
        assumptions = paper_assumptions(bounds)
    if private and p.fit_intercept and not label_mode:
        notes.append("the intercept is computed by the label-holding coordinator from the noisy shares and its "
                     "own labels (post-processing); it is not shared")
    nseed = noise_seed(p.random_state)
    monitor = (not any_private) if p.monitor is None else bool(p.monitor)
    noise = _calibrate(p, loss=loss, max_iter=max_iter, y_fit=y_fit, nseed=nseed, n_blocks=len(blocks),
                       checkpoint_dir=checkpoint_dir, resume_from=resume_from, notes=notes)
    V, V_inf = p.run_clip(n, rho, noise.sigma_label)
    if private and not paper:
        assumptions = gaussian_assumptions(V, V_inf, p.relation, vertical_messages.RELATIONS[p.relation].description)
    lam_run = p.run_lam(n)  # λ of the joint run (stronger on randomized-response labels)
    damping = (0.0 if (private or mm) else 0.5) if p.damping == "auto" else float(p.damping)
    pspec = None
    if private:
        pspec = vertical_messages.PrivacySpec(noise_multiplier=noise.nm, noise_scale=p.noise_scale, c1=1.0, bounds=bounds,
                               n_parties=len(blocks), mechanism=p.mechanism, relation=p.relation,
                               clip=V, clip_inf=V_inf)
    specs = []
    for m, (name, B) in enumerate(zip(names, blocks)):
        opts = VerticalOptions(lam_sum=n * lam_run, reg=reg, private=pspec, bound=bx, damping=damping,  # the paper's
                               solver=p.solver, eval_blocks={k: Xe[m] for k, (Xe, _) in evals.items()},  # summed scaling
                               require_unit_rows=bool(paper and is_source(B)),
                               labels=y_fit if (m == 0 and refits) else None)  # the label party's own (exact) labels
        handlers = LABEL_PARTY_HANDLERS if (m == 0 and refits) else HANDLERS
        specs.append(PartySpec.of(PROTOCOL, name, Setup(name=name, D=B, options=opts), owner=name, handlers=handlers))
    hub_cfg = vertical_messages.CoordinatorConfig(
        labels=noise.hub_labels, loss=loss, lam=lam_run, rho=rho,
        party_names=tuple(s.name for s in specs), bounds=bounds, fit_intercept=bool(p.fit_intercept),
        adaptive_rho=bool(p.adaptive_rho),
        tol=float(p.tol or 0.0), eval_labels={k: yv for k, (_, yv) in evals.items()}, label_privacy=noise.label_spec,
    )
    # the stopping rule reads the coordinator's residuals every round, monitored or not (rounds after the one
    # randomized-response release are free, so a run on released labels stops when done too)
    hub = engine.Hub(hub_cfg, vertical_coordinator.init_coordinator, vertical_coordinator.coordinator_step,
                     vertical_coordinator.coordinator_metrics, converged=coordinator_converged)
    started: dict = {}

    def on_started(backend):
        started["setup_seconds"] = time.perf_counter() - t_fit  # validation + party setup (before round 1)
        # Un-noised party values (local models x_m, eval-set partial scores) reach the driver only in a
        # non-private fit, in the in-process simulation (where the driver holds everything anyway), or
        # when the user opted in with monitor=True (then the report names them).
        started["collect"] = (not private) or backend.collects_models or monitor
        if private and monitor:
            notes.append("monitor=True: monitoring values (training objective from the true x_m), local models x_m "
                         "and eval-set partial scores left the parties un-noised; they are NOT covered by the "
                         "guarantee")
        elif private and backend.collects_models:
            notes.append("in-process simulation: the driver holds every party's local model x_m (for predict); in a "
                         "deployment (out-of-process backend) the models stay at the parties")

    def after(backend, result):
        # a noisy run (alpha refitted) whenever the shares or the labels the run used were noisy (with no noise at
        # all the protocol is exact and alpha = 1 keeps "zero noise == non-private")
        noisy = private or rr or (noise.label_spec is not None
                                  and (noise.sigma_label > 0 or noise.label_nm is not None))
        return _after_training(p, backend, result, names=names, evals=evals, collect=started["collect"],
                               refits=refits, private=private, paper=paper, noisy=noisy, loss=loss, notes=notes,
                               transcript=transcript)

    fitted = runner.run(get_backend(backend), specs, hub, rounds=max_iter, noise_seed=nseed,
                        on_started=on_started, after=after, callbacks=callbacks, monitor=monitor,
                        stop_on_convergence=not (private or mm), checkpoint_every=checkpoint_every,
                        checkpoint_dir=checkpoint_dir, resume_from=resume_from, transcript=transcript)
    result, out = fitted.result, fitted.after
    if out["deficient"]:  # one warning per fit, phrased for the user; the details are in the report's notes
        warnings.warn(f"linearly dependent columns ({'; '.join(out['deficient'])}; e.g. one-hot groups), so "
                      "[Hu, eq. 16]'s (D_m^T D_m)^-1 does not exist; its noise is drawn in the range of "
                      "each party's data instead (the same distribution whenever the inverse exists; "
                      "see the privacy report's notes).", RankDeficiencyWarning, stacklevel=3)
    if noise.rr_events:
        result.ledger.record(noise.rr_events)
    privacy = None
    if any_private:
        privacy = vertical_run_report(result.ledger, feature_private=private, label_private=label_mode, mode=mode,
                                      delta=p.delta, accountant=p.accountant, rounds=result.rounds,
                                      assumptions=assumptions, notes=notes, mechanism=p.mechanism,
                                      relation=p.relation, noise_source=result.noise_source)
    elif not result.converged and max_iter > 1 and (p.tol or 0) > 0:
        warnings.warn(f"ADMM did not reach tol={p.tol} in max_iter={max_iter} iterations; "
                      "increase max_iter or use adaptive_rho=True.", ConvergenceWarning, stacklevel=3)
    return FitResult(party_dims=party_dims, coefs=out["coefs"], intercept=out["intercept"],
                       passive_weight=out["passive_weight"], label_coef=out["label_coef"],
                       label_party_choice=out["choice"], label_party_cv=out["cv"], eval_scores=out["eval_scores"],
                       noise_source=result.noise_source,
                       history=History(result.history, monitored=monitor, private=any_private),
                       n_iter=result.rounds, converged=result.converged, noise_multiplier=noise.nm,
                       label_noise_multiplier=noise.label_nm, privacy=privacy,
                       setup_seconds=started["setup_seconds"])


def _after_training(p: VerticalParams, backend, result, *, names, evals, collect: bool, refits: bool, private: bool, paper: bool,
                    noisy: bool, loss, notes: list, transcript) -> dict:
    """The declared requests after the last round, on the still-open backend: the local models (where they may
    leave the parties), the label party's refit, the blocks' ranks (``mechanism="paper"``) and the eval scores."""
    # a party in another organisation never sends its model (it writes it to its own directory)
    remote = backend.models_stay_at_parties
    coefs = [backend.request(name, "coef") for name in names] if collect and not remote else None
    out = {"intercept": float(result.hub_state.intercept), "passive_weight": 1.0, "label_coef": None,
           "choice": None, "cv": None, "deficient": []}
    refit = None
    if refits:
        # the label party (which is also the coordinator) refits its own block, the intercept and a weight
        # on the others' shares on its exact labels, and keeps that or its own model (whichever
        # cross-validates better on its rows); the result never goes to a passive party
        refit = backend.request(names[0], "refit", result.hub_state.passive_total, loss.name,
                                bool(p.fit_intercept), out["intercept"], noisy, bool(p.fallback),
                                float(p.lam), float(p.label_block_scale))
        alpha = refit["passive_weight"]
        out.update(passive_weight=alpha, label_coef=np.asarray(refit["coef"]), choice=refit.get("choice"),
                   cv=refit.get("cv"), intercept=refit["intercept"])
        if coefs is not None:
            coefs = [refit["coef"]] + [alpha * c for c in coefs[1:]]
        notes.append(f"the label party's own block, the intercept and a weight alpha = {alpha:.3g} on the other "
                     "parties' partial scores are refit on its exact labels after the last round, given the "
                     "other parties' shares as received; that model stays with the label party")
        if refit.get("cv") is not None:
            notes.append(f"the label party kept the {refit['choice']} model (5-fold cross-validated loss on its "
                         f"own rows: joint {refit['cv']['joint']:.4g}, its own model {refit['cv']['alone']:.4g}); "
                         "the choice stays with the label party")
    out["coefs"] = coefs
    if transcript is not None and coefs is not None:  # x_m collected (simulation or opt-in)
        for name, coef in zip(names, coefs):
            transcript(result.rounds, name, engine.HUB, {"coef": coef}, "model")
    if paper and collect:
        for m, name in enumerate(names, start=1):
            rank, width = backend.request(name, "rank")
            if rank is not None and rank < width:
                notes.append(f"party {m}'s block has rank {rank} < {width} columns, so (D_m^T D_m)^-1 of "
                             "[Hu, eq. 16] does not exist; its noise is drawn as sigma U_m g in range(D_m) "
                             "(the same distribution whenever D_m has full rank; no regularisation needed)")
                out["deficient"].append(f"party {m}: rank {rank} of {width}")
    # eval scores summed from the parties' partial scores (needed when the driver has no eval features);
    # a feature-private fit sends no un-noised partial scores X_m x_m off a party (x_m depends on D_m beyond
    # the noisy shares): only non-private feature sides (label-only fits) score passive parties' eval sets
    out["eval_scores"] = {}
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
        out["eval_scores"][k] = sum(parts.values()) + out["intercept"]
    return out


__all__ = ["FitResult", "HANDLERS", "LABEL_PARTY_HANDLERS", "RankDeficiencyWarning", "VerticalData", "fit", "is_source",
           "party_names", "rr_labels"]
