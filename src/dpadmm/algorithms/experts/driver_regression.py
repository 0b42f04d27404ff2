"""The label party's side of an experts fit with a regression target (issue 41), in-process or deployed.

The same protocol as :mod:`.driver` (one round on a backend, every feature party running
:func:`dpadmm.algorithms.experts.party.fit_step`), with a real-valued label (:mod:`.regression`):

1. the label party fits its own model on its exact labels (:func:`.alone.fit_label_party_alone_regression`; local),
   holds out a random share of its rows (:func:`.calibrate.split`, its own stream) and sends every other party the
   labels of the other rows, clipped to the DECLARED range ``label_range`` and scaled to [−1, 1]. In a private run the
   range must be declared: a range read off the labels would move with one record's label and every scaled label
   with it, which the sensitivity proof does not cover (a non-private run may read it off the labels);
2. each party bounds its columns (declared, or a DP range estimate from its own budget: :mod:`.prepare`), fits its
   ridge (squared or Huber loss), perturbs it once and keeps it; it answers its prediction on the held-out rows
   (records outside its fit: post-processing);
3. the label party chooses between a least-squares stack and its own model by cross-validation on those rows
   (:mod:`.stack`; no privacy cost), so the handed-over model is the label party alone unless the stack beats it.

Label privacy (``label_epsilon``). Without it the labels are sent exactly: they are not protected. With it the label
party releases the labels of the rows it sends ONCE through randomized response on bins
(:func:`dpadmm.privacy.label_mechanisms.rr_on_bins`, Ghazi et al. 2023, whose docstring holds the proof: a Laplace
prior on ``N_BINS`` equal-width public bins of the DECLARED range (``PRIOR_FRACTION`` of the label ε), the optimal bins
for the squared loss under it, randomized response on their outputs; pure ε, δ = 0, label relation), with the
labels-only protocol's choices (:func:`dpadmm.estimators.label_regression.release_regression_labels`: same bins, prior
share and bins loss; the range is declared, so no DP range step), and sends only that release, scaled as above. Every
released value is a bin output inside ``[lo, hi]`` (and is clipped to it, then to [−1, 1] by the receiving party), so
the premise ``|y'_i| ≤ 1`` of the parties' sensitivity proof (:mod:`.regression`) holds as before and their Δ is
unchanged; what each party does with the release is post-processing of it, so against the other parties the labels
are ``label_epsilon``-DP. As in the binary experts path with ``label_epsilon``, the label party's own model and its
choice (the stack's weights, fitted on its held-out rows) use its exact labels locally: nothing computed from them
leaves it except the final model it keeps. The release's events (``PureDPRelease``, prior and randomized response)
are booked by the same accountant as the binary path's randomized response (pure ε, added).

The accountant is the binary one's (:func:`.report.experts_report`): one Gaussian release per party (and its range
estimate's), record relation, dp-accounting PLD; on the label side the release above, or "not protected".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..._validation import noise_seed
from ...backends import get_backend
from ...backends.base import PartySpec, party_rng
from ...exceptions import InvalidDataError, InvalidParameterError
from ...privacy.label_mechanisms import rr_on_bins
from ...privacy.ledger import PrivacyReport
from . import calibrate as xc, prepare as xp, regression as xr, stack
from .alone import fit_label_party_alone_regression, standardise
from .driver import HELDOUT, SIMULATION_NOTE, _run, party_specs
from .messages import Setup
from .model import augment
from .params import ExpertsParams
from .protocol import PROTOCOL
from .report import experts_report

#: the regression target's default noise-norm rule (scaled label units: the label range's half-width is 1); chosen on
#: diamonds and Computers at ε = 1 among 0.02, 0.05, 0.1, 0.25, 1 (0.1: within 5% of the best on both; 1: the
#: stack lost to the own model on Computers)
NOISE_NORM = 0.1


@dataclass(frozen=True)
class RegressionParams:
    """One regression experts fit's parameters, checked when built (:meth:`of`)."""

    common: ExpertsParams
    label_range: tuple | None
    loss: str
    huber_kappa: float

    @classmethod
    def of(cls, *, lam=1e-3, epsilon=None, delta=1e-5, label_range=None, loss="squared", huber_kappa=xr.HUBER_KAPPA,
           row_clip=1.0, noise_norm=NOISE_NORM, random_state=None, bounds="dp", calibrate=True,
           label_epsilon=None) -> "RegressionParams":
        common = ExpertsParams(lam=lam, epsilon=epsilon, delta=delta, row_clip=row_clip, noise_norm=noise_norm,
                               random_state=random_state, bounds=bounds, calibrate=calibrate,
                               label_epsilon=label_epsilon)
        if label_epsilon is not None and label_range is None:
            raise InvalidParameterError("label_epsilon needs a declared label_range=(lo, hi): the randomized response's "
                                        "bins are public values of that range (a range read off the labels would "
                                        "release them unaccounted); declare the range the labels are clipped to")
        loss, kappa = xr.check_loss(loss, huber_kappa)
        if label_range is None and epsilon is not None:
            raise InvalidParameterError("a private run (epsilon=) needs a declared label_range=(lo, hi): a range read "
                                        "off the labels moves with one record's label, and every scaled label with it, "
                                        "which the parties' sensitivity bound does not cover; declare the range the "
                                        "labels are clipped to")
        rng_ = None if label_range is None else xr.check_label_range(label_range)
        return cls(common, rng_, loss, kappa)


@dataclass
class RegressionFitResult:
    """What one fit returns (the estimator's attributes of the same names, with a trailing underscore)."""

    n_blocks: int
    noise_source: str
    own_coef: np.ndarray
    own_scaling: Any
    label_range: tuple
    label_mean: float
    coefs: list = field(default_factory=list)
    expert_lambdas: list = field(default_factory=list)
    experts: list = field(default_factory=list)
    column_bounds: list = field(default_factory=list)
    calibration: Any = None
    privacy: PrivacyReport | None = None
    remote: Any = None  # fit_remote: (backend, the parties' names); the backend stays open (the caller's)


def labels(y, n: int) -> np.ndarray:
    """The labels as finite floats, one per row (one clear error otherwise)."""
    try:
        v = np.asarray(y, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        raise InvalidDataError("y must be numbers for a regression target (amounts), got non-numeric labels") from None
    if v.shape != (n,):
        raise InvalidDataError(f"y has {v.size} labels for {n} rows; give one label per row")
    if not np.all(np.isfinite(v)):
        raise InvalidDataError(f"y holds {int(np.sum(~np.isfinite(v)))} missing or infinite value(s); drop or fill them")
    return v


#: what the report's label line says of the release (the labels-only protocol's mechanism, with a declared range)
LABEL_MECHANISM = ("randomized response on bins (Ghazi et al. 2023): Laplace prior on public bins of the declared "
                   "range, optimal bins, randomized response on their outputs; released once, the parties' ridges are "
                   "post-processing of it")


def sent_labels(p: RegressionParams, y, lo: float, hi: float, seed, n_blocks: int) -> tuple[np.ndarray, list]:
    """The labels the label party sends (scaled to [−1, 1]) and the events of their release (module docstring): the
    exact labels clipped to ``[lo, hi]`` (no event), or with ``label_epsilon`` one release by randomized response on
    bins of the declared range (its stream ``(n_blocks + 1, 0)``, the binary path's; OS entropy without a seed)."""
    eps = p.common.label_epsilon
    if eps is None:
        return xr.scale_labels(y, lo, hi), []
    rng = np.random.default_rng() if seed is None else party_rng(seed, n_blocks + 1, 0)
    rel = rr_on_bins(y, float(eps), rng=rng, label_range=(lo, hi), party="party1")
    return xr.scale_labels(rel.labels, lo, hi), list(rel.events)


def _report(p: RegressionParams, events, pure, z, noise_source: str, simulation_note=None) -> PrivacyReport | None:
    """:func:`.report.experts_report` for the regression target, its label line naming the release (or the remedy)."""
    rep = experts_report(events, pure, delta=float(p.common.delta), noise_multiplier=z, noise_source=noise_source,
                         simulation_note=simulation_note,
                         model=f"ridge-regression ({p.loss} loss, labels clipped to the declared range)")
    if rep is not None and rep.label is not None:
        if pure:
            rep.label.update(mechanism=LABEL_MECHANISM, flip_probability=None)
        else:
            rep.label["remedy"] = " (label privacy: label_epsilon=, or --label-epsilon with --label-range)"
    return rep


def own_prediction(coef, scaling, X) -> np.ndarray:
    """The label party's own model's prediction on its rows ``X`` (raw label units)."""
    return np.asarray(augment(standardise(X, scaling), 1.0) @ coef).ravel()


def fit(p: RegressionParams, blocks, y, backend: Any = "inprocess") -> RegressionFitResult:
    """An in-process fit (module docstring): block 0 the label party's, ``y`` its labels in raw units."""
    c = p.common
    blocks = list(blocks)
    n = blocks[0].shape[0]
    y = labels(y, n)
    lo, hi = p.label_range if p.label_range is not None else (float(y.min()), float(max(y.max(), y.min() + 1e-12)))
    seed = noise_seed(c.random_state)
    own_coef, own_scaling = fit_label_party_alone_regression(blocks[0], y, float(c.lam))
    out = RegressionFitResult(len(blocks), "party-local" if seed is None else "seeded", own_coef, own_scaling,
                              (lo, hi), float(y.mean()))
    z_plain = xp.noise_multipliers(float(c.epsilon), float(c.delta), False)[1] if c.epsilon is not None else None
    specs, fit_rows, held, cal_rng = party_specs(c, blocks, seed, z_plain, loss=p.loss, huber_kappa=p.huber_kappa)
    names = [s.name for s in specs]

    def after(b, replies):
        models = [b.request(name, "model") for name in names]
        preds = [b.request(name, "logit", HELDOUT) for name in names] if held is not None else None
        return models, preds

    sent, pure = sent_labels(p, y[fit_rows], lo, hi, seed, len(blocks))
    replies, (models, preds) = _run(get_backend(backend), specs, sent, None, seed, after)
    out.coefs = [np.asarray(mdl["coef"]) for mdl in models]
    out.experts = [mdl["facts"] for mdl in models]
    out.expert_lambdas = [f["lam"] for f in out.experts]
    out.column_bounds = [(mdl["lo"], mdl["hi"]) for mdl in models]
    if held is not None:  # the choice (.stack) on the held-out rows: its own model fitted without them
        own_fit, scaling = fit_label_party_alone_regression(blocks[0][fit_rows], y[fit_rows], float(c.lam))
        own = own_prediction(own_fit, scaling, blocks[0][held])
        E = np.column_stack([xr.unscale(v, lo, hi) for v in preds])
        out.calibration = stack.choose(own, E, y[held], cal_rng)
    elif c.calibrate:  # too few rows to hold out for the folds: the label party keeps its own model
        out.calibration = xc.own_model_choice(len(names))
    events = [e for name in names for e in replies[name][1]]
    out.privacy = _report(p, events, pure, z_plain, out.noise_source, SIMULATION_NOTE)
    return out


def fit_remote(p: RegressionParams, own_block, y, backend, parties, heldout=None) -> RegressionFitResult:
    """The label party's side of a deployment (``parties``: name → ``(train, score)`` references, as
    :func:`.driver.fit_remote`; each party serves ``vertical-experts`` and bounds its columns by its operator's
    ``--bounds``). ``heldout = (key, own_rows, labels)``: labelled records outside the fit (a new-records file ``key`` at
    every party): the label party chooses on them as the in-process fit does on its held-out rows (:mod:`.stack`);
    without them it hands over the additive combination. The backend stays open for :func:`remote_predict`."""
    c = p.common
    n = own_block.shape[0]
    y = labels(y, n)
    lo, hi = p.label_range if p.label_range is not None else (float(y.min()), float(max(y.max(), y.min() + 1e-12)))
    seed = noise_seed(c.random_state)
    own_coef, own_scaling = fit_label_party_alone_regression(own_block, y, float(c.lam))
    out = RegressionFitResult(len(parties) + 1, "party-local" if seed is None else "seeded", own_coef, own_scaling,
                              (lo, hi), float(y.mean()))
    z = xp.noise_multipliers(float(c.epsilon), float(c.delta), False)[1] if c.epsilon is not None else None
    names = list(parties)
    specs = [PartySpec.of(PROTOCOL, name, Setup(name=name, train=train, score=dict(score or {}), R=float(c.row_clip),
                                                lam=float(c.lam), noise_multiplier=z, noise_norm=float(c.noise_norm),
                                                loss=p.loss, huber_kappa=p.huber_kappa))
             for name, (train, score) in parties.items()]
    sent, pure = sent_labels(p, y, lo, hi, seed, len(names) + 1)
    replies, _ = _run(backend, specs, sent, None, seed, None, close=False)
    out.experts = [dict(replies[name][0]) for name in names]
    out.expert_lambdas = [float(f["lam"]) for f in out.experts]
    out.remote = (backend, names)
    if heldout is not None:
        key, rows, yh = heldout
        yh = labels(yh, np.asarray(rows).shape[0])
        own = own_prediction(own_coef, own_scaling, rows)
        E = np.column_stack(_remote_predictions(out, key, own.shape[0]))
        rng = np.random.default_rng() if seed is None else party_rng(seed, len(names) + 3, 0)
        out.calibration = stack.choose(own, E, yh, rng)
    events = [e for name in names for e in replies[name][1]]
    out.privacy = _report(p, events, pure, z, out.noise_source)
    return out


def _remote_predictions(fitted: RegressionFitResult, key: str, rows: int) -> list:
    """Each party's prediction (raw label units) on its rows of its new-records file ``key``, requested over the
    backend (post-processing of its release)."""
    backend, names = fitted.remote
    lo, hi = fitted.label_range
    preds = [xr.unscale(np.asarray(backend.request(name, "logit", key), dtype=np.float64).ravel(), lo, hi)
             for name in names]
    if any(v.shape != (rows,) for v in preds):
        raise InvalidDataError(f"a party scored {[v.shape[0] for v in preds]} rows of {key!r}, the label party {rows}; "
                               "align the new records (same ids) at every party")
    return preds


def remote_predict(fitted: RegressionFitResult, own_block, key: str) -> np.ndarray:
    """A deployment's prediction on new records: the label party's own rows ``own_block`` and each party's rows of its
    new-records file ``key`` (its choice; no request when it kept its own model)."""
    own = own_prediction(fitted.own_coef, fitted.own_scaling, own_block)
    if fitted.calibration is not None and fitted.calibration.kind == "own model":
        return own
    experts = _remote_predictions(fitted, key, own.shape[0])
    if fitted.calibration is None:
        return own + sum(e - fitted.label_mean for e in experts)
    return stack.apply(fitted.calibration, own, experts)


def expert_predictions(fitted: RegressionFitResult, blocks, R: float) -> list:
    """Each party's prediction (raw label units) on its rows of ``blocks`` (the simulation's driver holds the models)."""
    lo, hi = fitted.label_range
    return [xr.unscale(xr.expert_prediction(coef, xp.apply(B, blo, bhi, R), R), lo, hi)
            for coef, B, (blo, bhi) in zip(fitted.coefs, blocks, fitted.column_bounds)]


def predict(fitted: RegressionFitResult, blocks, R: float) -> np.ndarray:
    """The label party's final prediction: its choice (own model or stack); without one (``calibrate=False``) its own
    prediction plus each party's deviation from the training mean (an additive combination)."""
    own = own_prediction(fitted.own_coef, fitted.own_scaling, blocks[0])
    if fitted.calibration is not None and fitted.calibration.kind == "own model":
        return own
    experts = expert_predictions(fitted, blocks[1:], R)
    if fitted.calibration is None:
        return own + sum(e - fitted.label_mean for e in experts)
    return stack.apply(fitted.calibration, own, experts)


__all__ = ["NOISE_NORM", "RegressionFitResult", "RegressionParams", "fit", "fit_remote", "predict", "remote_predict"]
