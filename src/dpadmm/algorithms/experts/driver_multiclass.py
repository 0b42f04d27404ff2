"""The label party's side of an experts fit with K ≥ 3 declared classes (issue 41), in-process or deployed.

The same protocol as :mod:`.driver_regression` (one round on a backend, every feature party running
:func:`dpadmm.algorithms.experts.party.fit_step`) with a class label (:mod:`.multiclass`):

1. the label party fits its own multinomial model on its exact labels
   (:func:`.alone.fit_label_party_alone_multiclass`; local), holds out a random share of its rows
   (:func:`.calibrate.split`, its own stream) and sends every other party the one-hot targets of the other rows' class
   indices among the DECLARED classes (the caller encodes them: the estimator) — exact, or with ``label_epsilon`` of
   its ONE k-ary randomized-response release (:func:`dpadmm.privacy.label_mechanisms.k_randomized_response`, its
   stream ``(n_blocks + 1, 0)`` as the binary and regression paths): the other parties fit on that release only;
2. each party bounds its columns (declared, or a DP range estimate from its own budget: :mod:`.prepare`), fits its
   multi-output ridge and releases it once (Gaussian, priced by its own accountant as ONE release whatever K), and
   answers its K scores on the held-out rows (records outside its training set: post-processing);
3. the label party chooses between a multinomial stack of its own model and the scores, and its own model
   (:mod:`.stack_multiclass`), on its exact held-out labels (local).

Privacy: features — each party's one Gaussian release (and its range estimate), record relation, dp-accounting PLD;
labels — the k-ary randomized response, pure ``label_epsilon`` against the other parties, or "not protected" when
sent exactly. Everything the label party computes from its exact labels stays with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..._validation import noise_seed
from ...backends import get_backend
from ...exceptions import InvalidDataError
from ...backends.base import PartySpec, party_rng
from ...privacy.label_mechanisms import change_probability, k_randomized_response
from ...privacy.ledger import PrivacyReport
from . import calibrate as xc, multiclass as xm, prepare as xp, stack_multiclass as sm
from .alone import fit_label_party_alone_multiclass, label_party_alone_multiclass_proba
from .driver import HELDOUT, SIMULATION_NOTE, _run, party_specs
from .messages import Setup
from .params import ExpertsParams
from .protocol import PROTOCOL
from .report import experts_report

#: the multiclass target's default noise-norm rule (one-hot targets: the unit ball); as the regression target's
NOISE_NORM = 0.1
#: what the report's label line says of the release
LABEL_MECHANISM = ("k-ary randomized response over the declared classes: each label kept with probability "
                   "e^eps/(e^eps + K - 1), else one of the other K - 1 uniformly; released once, the parties' ridges "
                   "are post-processing of it")


@dataclass
class MulticlassFitResult:
    """What one fit returns (the estimator's attributes of the same names, with a trailing underscore)."""

    n_classes: int
    n_blocks: int
    noise_source: str
    own: Any  # the label party's own model (fit_label_party_alone_multiclass's triple)
    coefs: list = field(default_factory=list)
    expert_lambdas: list = field(default_factory=list)
    experts: list = field(default_factory=list)
    column_bounds: list = field(default_factory=list)
    calibration: Any = None
    stack: Any = None  # the chosen stack (None: the own model)
    change_probability: float | None = None
    privacy: PrivacyReport | None = None
    remote: Any = None  # fit_remote: (backend, the parties' names); the backend stays open (the caller's)


def sent_targets(p: ExpertsParams, index, k: int, seed, n_blocks: int) -> tuple[np.ndarray, list]:
    """The one-hot targets the label party sends and the events of their release (module docstring step 1)."""
    if p.label_epsilon is None:
        return xm.one_hot(index, k), []
    rng = np.random.default_rng() if seed is None else party_rng(seed, n_blocks + 1, 0)
    released, events = k_randomized_response(index, k, float(p.label_epsilon), rng=rng, party="party1")
    return xm.one_hot(released, k), list(events)


def _report(p: ExpertsParams, events, pure, z, noise_source: str, k: int) -> PrivacyReport | None:
    rep = experts_report(events, pure, delta=float(p.delta), noise_multiplier=z, noise_source=noise_source,
                         simulation_note=SIMULATION_NOTE,
                         model=f"multi-output ridge ({k} one-hot targets, one release)")
    if rep is not None and rep.label is not None:
        if pure:
            rep.label.update(mechanism=LABEL_MECHANISM,
                             flip_probability=change_probability(float(p.label_epsilon), k))
        else:
            rep.label["remedy"] = " (label privacy: label_epsilon= with declared classes=)"
    return rep


def fit(p: ExpertsParams, blocks, index, k: int, backend: Any = "inprocess") -> MulticlassFitResult:
    """An in-process fit (module docstring): block 0 the label party's, ``index`` its labels' class indices among the
    ``k`` declared classes (``0 ≤ index < k``)."""
    blocks = list(blocks)
    index = np.asarray(index, dtype=np.int64)
    seed = noise_seed(p.random_state)
    out = MulticlassFitResult(int(k), len(blocks), "party-local" if seed is None else "seeded",
                              fit_label_party_alone_multiclass(blocks[0], index, k, float(p.lam)))
    z_plain = xp.noise_multipliers(float(p.epsilon), float(p.delta), False)[1] if p.epsilon is not None else None
    specs, fit_rows, held, cal_rng = party_specs(p, blocks, seed, z_plain, loss=xm.LOSS)
    names = [s.name for s in specs]

    def after(b, replies):
        models = [b.request(name, "model") for name in names]
        preds = [b.request(name, "logit", HELDOUT) for name in names] if held is not None else None
        return models, preds

    sent, pure = sent_targets(p, index[fit_rows], k, seed, len(blocks))
    replies, (models, preds) = _run(get_backend(backend), specs, sent, None, seed, after)
    out.coefs = [np.asarray(mdl["coef"]) for mdl in models]
    out.experts = [mdl["facts"] for mdl in models]
    out.expert_lambdas = [f["lam"] for f in out.experts]
    out.column_bounds = [(mdl["lo"], mdl["hi"]) for mdl in models]
    if p.label_epsilon is not None:
        out.change_probability = change_probability(float(p.label_epsilon), k)
    if held is not None:  # the choice on the held-out rows: its own model fitted without them
        own_fit = fit_label_party_alone_multiclass(blocks[0][fit_rows], index[fit_rows], k, float(p.lam))
        own = label_party_alone_multiclass_proba(own_fit, blocks[0][held], k)
        out.calibration, out.stack = sm.choose(own, [np.asarray(v, dtype=np.float64) for v in preds], index[held], k,
                                               cal_rng)
    elif p.calibrate:  # too few rows to hold out for the folds: the label party keeps its own model
        out.calibration = xc.own_model_choice(len(names))
    events = [e for name in names for e in replies[name][1]]
    out.privacy = _report(p, events, pure, z_plain, out.noise_source, k)
    return out


def fit_remote(p: ExpertsParams, own_block, index, k: int, backend, parties, heldout=None) -> MulticlassFitResult:
    """The label party's side of a deployment (``parties``: name → ``(train, score)`` references, as
    :func:`.driver.fit_remote`; each party serves ``vertical-experts`` and bounds its columns by its operator's
    ``--bounds``). ``heldout = (key, own_rows, index)``: labelled records outside the fit (a new-records file ``key`` at
    every party, their class indices): the label party chooses on them as the in-process fit does on its held-out
    rows; without them it hands over the additive combination. The backend stays open for :func:`remote_predict`."""
    index = np.asarray(index, dtype=np.int64)
    seed = noise_seed(p.random_state)
    out = MulticlassFitResult(int(k), len(parties) + 1, "party-local" if seed is None else "seeded",
                              fit_label_party_alone_multiclass(own_block, index, k, float(p.lam)))
    z = xp.noise_multipliers(float(p.epsilon), float(p.delta), False)[1] if p.epsilon is not None else None
    names = list(parties)
    specs = [PartySpec.of(PROTOCOL, name, Setup(name=name, train=train, score=dict(score or {}), R=float(p.row_clip),
                                                lam=float(p.lam), noise_multiplier=z, noise_norm=float(p.noise_norm),
                                                loss=xm.LOSS))
             for name, (train, score) in parties.items()]
    sent, pure = sent_targets(p, index, k, seed, len(names) + 1)
    replies, _ = _run(backend, specs, sent, None, seed, None, close=False)
    out.experts = [dict(replies[name][0]) for name in names]
    out.expert_lambdas = [float(f["lam"]) for f in out.experts]
    out.remote = (backend, names)
    if p.label_epsilon is not None:
        out.change_probability = change_probability(float(p.label_epsilon), k)
    if heldout is not None:
        key, rows, idx = heldout
        own = label_party_alone_multiclass_proba(out.own, np.asarray(rows, dtype=np.float64), k)
        rng = np.random.default_rng() if seed is None else party_rng(seed, len(names) + 3, 0)
        out.calibration, out.stack = sm.choose(own, _remote_scores(out, key, own.shape[0]), idx, k, rng)
    events = [e for name in names for e in replies[name][1]]
    out.privacy = _report(p, events, pure, z, out.noise_source, k)
    return out


def _remote_scores(fitted: MulticlassFitResult, key: str, rows: int) -> list:
    """Each party's (rows, K) scores on its rows of its new-records file ``key``, requested over the backend."""
    backend, names = fitted.remote
    scores = [np.asarray(backend.request(name, "logit", key), dtype=np.float64) for name in names]
    if any(v.shape != (rows, fitted.n_classes) for v in scores):
        raise InvalidDataError(f"a party scored {[v.shape[0] for v in scores]} rows of {key!r}, the label party {rows}; "
                               "align the new records (same ids) at every party")
    return scores


def remote_predict(fitted: MulticlassFitResult, own_block, key: str) -> np.ndarray:
    """A deployment's (rows, K) probabilities on new records: the label party's rows ``own_block`` and each party's
    rows of its new-records file ``key`` (no request when it kept its own model)."""
    own = label_party_alone_multiclass_proba(fitted.own, own_block, fitted.n_classes)
    if fitted.calibration is not None and fitted.stack is None:
        return own
    return _combine(fitted, own, _remote_scores(fitted, key, own.shape[0]))


def _combine(fitted: MulticlassFitResult, own, experts) -> np.ndarray:
    """The choice applied; without one (``calibrate=False``, or a deployment without held-out records) a softmax of the
    own log-probabilities plus each party's centred scores."""
    if fitted.calibration is None:
        s = sm.log_own(own) + sum(e - e.mean(axis=1, keepdims=True) for e in experts)
        s = np.exp(s - s.max(axis=1, keepdims=True))
        return s / s.sum(axis=1, keepdims=True)
    return sm.apply(fitted.stack, fitted.n_classes, own, experts)


def expert_scores(fitted: MulticlassFitResult, blocks, R: float) -> list:
    """Each party's (rows, K) scores on its rows of ``blocks`` (the simulation's driver holds the models)."""
    return [xm.expert_scores(coef, xp.apply(B, lo, hi, R), R)
            for coef, B, (lo, hi) in zip(fitted.coefs, blocks, fitted.column_bounds)]


def predict_proba(fitted: MulticlassFitResult, blocks, R: float) -> np.ndarray:
    """The label party's final (rows, K) probabilities: its choice (own model or stack); without one
    (``calibrate=False``) its own model's log-probabilities plus each party's scores, renormalised (a softmax of an
    additive combination)."""
    own = label_party_alone_multiclass_proba(fitted.own, blocks[0], fitted.n_classes)
    if fitted.calibration is not None and fitted.stack is None:
        return own
    return _combine(fitted, own, expert_scores(fitted, blocks[1:], R))


__all__ = ["MulticlassFitResult", "NOISE_NORM", "fit", "fit_remote", "predict_proba", "remote_predict", "sent_targets"]
