"""The driver of the vertical experts protocol: the label party's side of a fit, in-process or deployed.

:func:`fit` (an in-process simulation) and :func:`fit_remote` (a deployment: each feature party serves
``vertical-experts``) run the same protocol: the label party fits its own model on its exact labels, sends the
labels (exact, or one randomized-response release) in the protocol's one round, and every feature party fits, keeps
and perturbs its model in :func:`dpadmm.algorithms.experts.party.fit_step`, hosted by the backend like any party.
The budgets become noise here and nowhere else: the flip probability of the labels' release, the noise multiplier of
each party's model and, with a DP range estimate of its columns, the split of its budget
(:func:`dpadmm.algorithms.experts.prepare.noise_multipliers`).

In the simulation the feature parties are also given their column bounds (``bounds``: a DP range estimate on their
own rows, or declared ones) and the label party holds out some of its rows: it asks the parties for their logits on
those rows (records outside their training sets) and chooses between the combination and its own model
(:mod:`.calibrate`). Nothing in this folder imports this module (it runs the protocol on a backend).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, NamedTuple

import numpy as np

from ..._validation import binary_labels, noise_seed
from ...exceptions import InvalidDataError
from ...backends import get_backend
from ...backends.base import PartySpec, party_rng
from ...fit import runner
from ...privacy.accountants import calibrate_noise_multiplier
from ...privacy.ledger import PrivacyReport
from ..vertical import label as vl
from . import calibrate as xc, model as experts_model, prepare as xp
from .alone import fit_label_party_alone, standardise
from .messages import FitRequest, Setup
from .params import ExpertsParams
from .party import simulation_model
from .protocol import PROTOCOL
from .report import experts_report, nothing_released

#: the in-process fit's note: what the driver holds there that a deployment never releases
SIMULATION_NOTE = ("in-process simulation: the driver holds every party's block and coefficient (coefs_; "
                   "decision_function scores any rows, training rows included, whose logits the guarantee does not "
                   "cover, and the CLI's rows_clipped is computed from the parties' rows); in a deployment "
                   "(fit_remote, party serve) each party keeps its model and scores only new records")
#: the key of the label party's held-out rows at each simulated party (scored, never trained on)
HELDOUT = "heldout"


class ExpertsData(NamedTuple):
    """An in-process fit's data: the party blocks (block 0 the label party's) and the labels (two classes)."""

    blocks: list
    y: np.ndarray


@dataclass
class FitResult:
    """What one fit returns (the estimator's attributes of the same names, with a trailing underscore)."""

    classes: np.ndarray
    n_blocks: int
    noise_source: str
    own_coef: np.ndarray
    own_scaling: Any
    prior_logit: float
    flip_probability: float | None = None
    effective_rows: float | None = None
    kept_own_model: bool = False
    coefs: list = field(default_factory=list)
    expert_lambdas: list = field(default_factory=list)
    experts: list = field(default_factory=list)
    column_bounds: list | None = None  # in-process fits only
    calibration: Any = None
    privacy: PrivacyReport | None = None
    remote_names: list = field(default_factory=list)  # fit_remote: the parties that hold a model


class _Sent(NamedTuple):
    seed: int | None
    labels: np.ndarray
    pure: list  # the randomized response's release (empty: exact labels)
    z: float | None  # each party's noise multiplier for its one release (without a range estimate)


def _label_side(p: ExpertsParams, own_block, y, n_blocks: int) -> tuple[FitResult, _Sent | None]:
    """The label party's part (it never leaves it): its own model on its exact labels, the prior log-odds, the labels
    it sends (exact or one randomized-response release) and the noise multiplier it asks for. ``None`` for the second
    value when it keeps its own model and sends nothing (``kept_own_model``; the report says nothing was released)."""
    n = own_block.shape[0]
    private = p.epsilon is not None or p.label_epsilon is not None  # the declared domain, no class counted (T3)
    y_pm, classes = binary_labels("y", y, n, private=private)
    seed = noise_seed(p.random_state)
    own_coef, own_scaling = fit_label_party_alone(own_block, y_pm, float(p.lam))
    pos = float(np.clip(np.mean(y_pm > 0), 1e-6, 1 - 1e-6))
    out = FitResult(classes, int(n_blocks), "party-local" if seed is None else "seeded", own_coef, own_scaling,
                    math.log(pos / (1 - pos)))
    sent, pure = y_pm, []
    if p.label_epsilon is not None:
        q = vl.flip_probability(float(p.label_epsilon))
        out.effective_rows = n * (1.0 - 2.0 * q) ** 2
        if out.effective_rows < p.floor:  # public quantities only: the choice itself releases nothing
            out.kept_own_model = True
            out.privacy = nothing_released(effective_rows=out.effective_rows, floor=p.floor,
                                           label_epsilon=float(p.label_epsilon), delta=float(p.delta),
                                           noise_source=out.noise_source)
            return out, None
        # the label party's stream in a seeded simulation: (n_blocks + 1, 0)
        rng = np.random.default_rng() if seed is None else party_rng(seed, n_blocks + 1, 0)
        sent, pure = vl.randomized_response(y_pm, float(p.label_epsilon), rng=rng)
        out.flip_probability = q
    z = calibrate_noise_multiplier(float(p.epsilon), float(p.delta), 1) if p.epsilon is not None else None
    return out, _Sent(seed, np.asarray(sent), pure, z)


def party_specs(p: ExpertsParams, blocks, seed, z, **setup):
    """``(specs, fit_rows, held, cal_rng)`` of an in-process fit, every target alike: each other party's simulation spec —
    party m+1 is the (m−1)-th party of the run, its stream the one it has in a deployment (``fit_remote``) — at the
    noise multiplier ``z`` (None: non-private), or the range-estimating one where its bounds are a DP estimate; and
    the label party's fit rows and held-out rows, drawn from its stream (n_blocks + 2, 0) — ``cal_rng``, which its
    calibration goes on drawing from (labels for the held-out rows are never sent).
    ``setup``: the target's own Setup fields (``loss``, ``huber_kappa``)."""
    wanted = p.party_bounds(len(blocks) - 1)
    zr, zo = (xp.noise_multipliers(float(p.epsilon), float(p.delta), "dp" in [b for b in wanted if isinstance(b, str)])
              if z is not None else (None, None))
    n = blocks[0].shape[0]
    cal_rng = np.random.default_rng() if seed is None else party_rng(seed, len(blocks) + 2, 0)
    fit_rows, held = xc.split(n, cal_rng) if p.calibrate else (np.arange(n), None)
    specs = []
    for m, B in enumerate(blocks[1:], start=1):
        b = wanted[m - 1]
        zm = None if z is None else (zo if isinstance(b, str) and b == "dp" else z)
        st = Setup(name=f"party{m + 1}", train=B[fit_rows] if held is not None else B,
                   score={HELDOUT: B[held]} if held is not None else {}, R=float(p.row_clip), lam=float(p.lam),
                   noise_multiplier=zm, noise_norm=float(p.noise_norm), bounds=b,
                   range_noise_multiplier=zr if zm is not None else None, **setup)
        specs.append(PartySpec.of(PROTOCOL, st.name, st, handlers=dict(PROTOCOL.handlers, model=simulation_model)))
    return specs, fit_rows, held, cal_rng


def fit(p: ExpertsParams, data: ExpertsData, backend: Any = "inprocess") -> FitResult:
    """An in-process fit: every feature party is a simulation party on ``backend`` (default: in-process), running the
    protocol's step (see the module docstring)."""
    blocks = list(data.blocks)
    out, sent = _label_side(p, blocks[0], data.y, len(blocks))
    if sent is None:
        return out
    specs, fit_rows, held, cal_rng = party_specs(p, blocks, sent.seed, sent.z)
    names = [s.name for s in specs]

    def after(b, replies):
        models = [b.request(name, "model") for name in names]
        logits = [b.request(name, "logit", HELDOUT) for name in names] if held is not None else None
        return models, logits

    replies, (models, logits) = _run(get_backend(backend), specs, sent.labels[fit_rows], out.flip_probability,
                                     sent.seed, after)
    out.coefs = [np.asarray(mdl["coef"]) for mdl in models]
    out.experts = [mdl["facts"] for mdl in models]
    out.expert_lambdas = [f["lam"] for f in out.experts]
    out.column_bounds = [(mdl["lo"], mdl["hi"]) for mdl in models]
    if held is not None:
        out.calibration = _choose(p, out, blocks[0], data.y, fit_rows, held, logits, cal_rng)
    elif p.calibrate:  # too few rows to hold out for the folds: the label party keeps its own model
        out.calibration = xc.own_model_choice(len(names))
    events = [e for name in names for e in replies[name][1]]
    out.privacy = experts_report(events, sent.pure, delta=float(p.delta), noise_multiplier=sent.z,
                                 noise_source=out.noise_source, simulation_note=SIMULATION_NOTE)
    return out


def fit_remote(p: ExpertsParams, own_block, y, backend, parties: Mapping[str, tuple], heldout=None) -> FitResult:
    """The label party's side of a deployment (``parties``: name → ``(train, score)`` references, see
    :meth:`dpadmm.estimators.VerticalExpertsClassifier.fit_remote`); the backend stays open for the logits on new
    records (the caller closes it). When the label party keeps its own model no party is contacted.

    ``heldout = (key, own_rows, labels)``: labelled records outside the fit — the label party's rows and labels (they
    never leave it), and at every party its rows of the new-records file ``key`` (the same records, aligned). The
    label party then chooses as in the in-process fit (:func:`choice`: the same code): its own model's logit on
    those rows, the parties' logits on them (new records: post-processing of their DP models), its labels. A party
    never scores its training file, so a deployment's held-out records are a file of their own at every party."""
    names = list(parties)
    out, sent = _label_side(p, own_block, y, len(names) + 1)
    if sent is None:
        return out
    specs = [PartySpec.of(PROTOCOL, name, Setup(name=name, train=train, score=dict(score or {}), R=float(p.row_clip),
                                                lam=float(p.lam), noise_multiplier=sent.z,
                                                noise_norm=float(p.noise_norm)))
             for name, (train, score) in parties.items()]
    replies, _ = _run(backend, specs, sent.labels, out.flip_probability, sent.seed, None, close=False)
    out.experts = [dict(replies[name][0]) for name in names]
    out.expert_lambdas = [float(f["lam"]) for f in out.experts]
    out.remote_names = names
    if heldout is not None:
        out.calibration = _remote_choice(p, out, backend, names, heldout, sent.seed)
    out.privacy = experts_report([e for name in names for e in replies[name][1]], sent.pure, delta=float(p.delta),
                                 noise_multiplier=sent.z, noise_source=out.noise_source)
    return out


def _run(backend, specs, labels, flip_probability, seed, after, close: bool = True):
    """The protocol's one round: every party is sent the labels; one release per party, priced at its Setup
    (``rounds=1``). Returns each party's reply ``(message, events)`` and what ``after`` returned."""
    request = FitRequest(np.asarray(labels, dtype=np.float64), flip_probability)
    names = [s.name for s in specs]
    fitted = runner.session(backend, specs, lambda b: b.step({name: request for name in names}, 0),
                            noise_seed=seed, rounds=1, after=after, close=close, blas_threads=None)
    return fitted.result, fitted.after


def choice(own_logit, expert_logits, y_pm, prior_logit: float, rng) -> "xc.Choice":
    """The label party's choice on records outside the parties' fits (in-process and deployed alike):
    :func:`dpadmm.algorithms.experts.calibrate.choose` on its own model's logit there, each party's logit there
    minus the prior, its labels (±1); too few rows for the folds: its own model."""
    y_pm = np.asarray(y_pm, dtype=np.float64)
    if len(y_pm) < 2 * xc.FOLDS:
        return xc.own_model_choice(len(expert_logits), len(y_pm))
    experts = np.column_stack([np.asarray(v, dtype=np.float64) - prior_logit for v in expert_logits])
    return xc.choose(np.asarray(own_logit, dtype=np.float64), experts, y_pm, rng, shrink=True)


def _choose(p: ExpertsParams, out: FitResult, own_block, y, fit_rows, held, expert_logits, rng) -> "xc.Choice":
    """The in-process fit's choice on its held-out rows (:func:`choice`): its own model fitted on the other rows."""
    y_pm = binary_labels("y", y, own_block.shape[0], private=p.epsilon is not None or p.label_epsilon is not None)[0]
    own_fit, scaling = fit_label_party_alone(own_block[fit_rows], y_pm[fit_rows], float(p.lam))
    own = np.asarray(experts_model.augment(standardise(own_block[held], scaling), 1.0) @ own_fit).ravel()
    return choice(own, expert_logits, y_pm[held], out.prior_logit, rng)


def _remote_choice(p: ExpertsParams, out: FitResult, backend, names, heldout, seed) -> "xc.Choice":
    """A deployment's choice (:func:`choice`) on its held-out records: its own model (fitted on every training row;
    the held-out records are not among them), the parties' logits on their rows of the file ``key``."""
    key, rows, labels = heldout
    rows = np.asarray(rows, dtype=np.float64)
    labels = np.asarray(labels).ravel()
    if rows.ndim != 2 or labels.shape[0] != rows.shape[0] or not np.all(np.isin(labels, out.classes)):
        raise InvalidDataError(f"heldout must be (key, rows, labels): one label of {list(out.classes)} per row, got "
                               f"{labels.shape[0]} labels for {rows.shape[0] if rows.ndim else 0} rows")
    own = np.asarray(experts_model.augment(standardise(rows, out.own_scaling), 1.0) @ out.own_coef).ravel()
    logits = [np.asarray(backend.request(name, "logit", key), dtype=np.float64).ravel() for name in names]
    if any(v.shape != own.shape for v in logits):
        raise InvalidDataError(f"a party scored {[v.shape[0] for v in logits]} rows of {key!r}, the label party "
                               f"{own.shape[0]}; align the held-out records (same ids) at every party")
    rng = np.random.default_rng() if seed is None else party_rng(seed, len(names) + 3, 0)  # the in-process stream
    return choice(own, logits, np.where(labels == out.classes[1], 1.0, -1.0), out.prior_logit, rng)


__all__ = ["ExpertsData", "FitResult", "HELDOUT", "SIMULATION_NOTE", "choice", "fit", "fit_remote"]
