"""The feature party of the vertical experts protocol over the network (``dpadmm party serve --protocol
vertical-experts``): it fits its DP model once, keeps it, and answers only logits on NEW records.

The protocol, its threat model and the sensitivity proof are in :mod:`dpadmm.algorithms.experts.model`;
the declaration (``PROTOCOL``) is at its end. The messages, all declared:

- ``Setup(name, train, score, R, lam, noise_multiplier, noise_norm, model, flip_probability)``: ``train`` is a
  :class:`~dpadmm.protocol.PartyData` reference ``"train"`` the party reads from its own file (its rows
  aligned by the ids the label party sends, or by PSI), ``score`` maps keys of its NEW-records files
  (``"test"``, ``"new"``) to references read the same way. The party's own policy
  (:data:`dpadmm.algorithms.experts.policy.EXPERTS`) decides the row preparation, refuses a row clip R other than
  its operator's, a noise multiplier below its floor, a λ or noise-norm rule that is not a finite positive
  number, and prices the run as ONE Gaussian release against its own budget before anything is released;
- ``Step`` round 0 (:class:`FitRequest`): the labels (±1, one per training row; exact or randomized-response)
  and the public flip probability. The party fits and perturbs its coefficient (:func:`fit_expert`; its ridge
  is ``expert_lambda`` of public quantities and the sensitivity uses that ridge, whatever λ was sent), KEEPS
  it, and answers only public facts (λ used, Δ, σ, rows, columns). A second fit in one run would be a second
  release: refused;
- ``Request("logit", key)``: its logit ``a·θ̃`` on its rows of the NEW-records file ``key``, de-biased for
  the flip probability (:func:`expert_logit`). That is post-processing of the DP coefficient because those
  records are not in its training set. The logit of a TRAINING row, ``a_i·θ̃``, is not: it is a function of the
  protected row ``a_i`` itself, which the Gaussian mechanism's guarantee (about ``θ̃`` alone) does not cover — a
  per-row release of that row. So at Setup the party (:func:`dpadmm.algorithms.experts.policy._experts_training_rows`)
  reads its training rows from its own training file only (key ``train``), never scores that file (its rows
  outside the fit, e.g. outside a PSI intersection, were never shared either), and refuses a scoring file that
  shares an id with the rows it trains on — ids compared as the party's files write them, not as the coordinator
  spells them (``1.0`` joins the file's ``1``). The party identifies records by their ids: its operator must not
  file a training record under another id in a new-records file. No request returns the coefficient (``coef`` is not
  declared); at ``Finish`` the party writes it to its own directory (``model.npz``).

Scoring later (the bank's new customers, months after the fit): the party is started with its training file,
its new-records file and its own model file (``--data train=… --data new=… --data model=OUT/model.npz``); a
Setup with ``model`` set loads the coefficient instead of fitting (no release: nothing is priced, a fit is
refused), reads only the id column of its training file (key ``train``, whatever the coordinator names), refuses a
new-records file sharing an id with it, and
answers ``logit`` on the new records. What a refusal tells the coordinator: that some of the requested records of
the party's new-records file also appear in its training file (membership of ids the party holds in both, not
values; the fit run's training ids are the coordinator's own or the PSI intersection, which it knows anyway).

The request is named ``logit``, not ``score``: a party serving vertical ADMM refuses ``score`` in a private
run (partial scores of an ADMM model are not covered by its ε); an expert's logit on new records is covered.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd

from ...exceptions import InvalidDataError, InvalidParameterError, ProtocolError
from ...privacy.policy import PolicyRefusal
from ...privacy.ranges import scale_columns
from ..vertical.data import load_party_data
from ..vertical.scoring import PartyModel
from ..vertical.scoring import describe as describe_file
from ..vertical.scoring import load as load_model
from . import multiclass as xm, regression as xr
from .messages import ExpertConfig, ExpertState, FitRequest, Rows
from .model import expert_logit, fit_expert
from .prepare import apply as apply_bounds, prepare_party, public_facts


def load(path, params: Mapping[str, Any]):
    """Party side of a ``PartyData``: the party's CSV joined on the given (or PSI-aligned) ids; with ``ids_only`` the
    ids of every row of the file (the training rows a later scoring run must not score); a ``.npz`` file is the
    party's own model (:func:`dpadmm.algorithms.vertical.scoring.load`)."""
    if Path(path).suffix == ".npz":
        # private only if its record says so: serving logits is what a private model allows, so the strict reading
        # of a model without its model.json (or without "private") is "not private" (a budgeted party then refuses)
        return dataclasses.replace(load_model(path, params), private=_own_protocol(Path(path)))
    col = str(params.get("id_column", "id"))
    if params.get("ids_only"):
        return Rows(None, pd.read_csv(path, usecols=[col])[col].to_numpy(), str(path))
    X = load_party_data(path, params)  # refuses ids not in the file, and repeated ids (a row joined twice)
    if params.get("bounds") is not None:  # its operator's declared column bounds (set by its policy, never sent)
        lo, hi = (np.asarray(v, dtype=np.float64) for v in params["bounds"])
        if lo.shape != (X.shape[1],):
            raise PolicyRefusal(f"the operator's --bounds declare {lo.shape[0]} columns, the file {Path(path).name} "
                                f"has {X.shape[1]}; declare one lo, hi per feature column")
        X = scale_columns(X, lo, hi, float(params.get("bounds_radius", 1.0)))
    # the rows' ids as the FILE writes them (the coordinator may send 1.0 for the file's 1, which the join accepts):
    # the training-row check compares these, never the coordinator's spelling
    own = pd.Index(pd.read_csv(path, usecols=[col])[col])
    sent = np.asarray(params["ids"])
    pos = own.get_indexer(pd.Index(sent))
    return Rows(X, np.where(pos >= 0, own.to_numpy()[np.maximum(pos, 0)], sent) if (pos < 0).any() else
                own.to_numpy()[pos], str(path))


def _own_protocol(path) -> bool:
    """Whether the model file's record (``model.json`` beside it) says a private run wrote it. A model file written by
    a run of another protocol is refused: e.g. a vertical ADMM block, whose partial scores a private party does not
    release, must not be scored as an expert's logit."""
    meta = path.with_suffix(".json")
    try:
        rec = json.loads(meta.read_text()) if meta.is_file() else {}
    except ValueError:
        rec = {}
    rec = rec if isinstance(rec, dict) else {}
    proto = rec.get("protocol")
    if proto is not None and proto != "vertical-experts":
        raise PolicyRefusal(f"the model file {path.name} is from a {proto!r} run, not a vertical-experts fit; score "
                            "with the model an experts run wrote")
    return rec.get("private") is True


def describe(path, id_column: str = "id", label_column: str = "y") -> dict:
    return describe_file(path, id_column, label_column)


def _block(v):
    return v.X if isinstance(v, Rows) else v


def _ids(v):
    return v.ids if isinstance(v, Rows) else None


def setup_party(name: str, train, score=None, R: float = 1.0, lam: float = 1e-3, noise_multiplier=None,
                noise_norm: float = 0.5, model=None, flip_probability=None, bounds=None, range_noise_multiplier=None,
                loss: str = "logistic", huber_kappa: float = 0.5):
    """The party's configuration; refuses scoring rows that are training rows (see the module docstring). The check
    is by id, on blocks read from the party's own files; arrays a simulation's coordinator sends
    (``--accept-coordinator-data``) carry no ids and are the coordinator's own data anyway."""
    score = dict(score or {})
    train_ids = _ids(train)
    for key, rows in score.items():
        ids = _ids(rows)
        if _same_file(train, rows):  # e.g. its operator gave the training file under a second key
            raise PolicyRefusal(f"party {name!r} refused to score {key!r}: it is its training file, whose rows are never "
                                "scored; score new records, in a file of their own (--data new=FILE)")
        if train_ids is not None and ids is not None:
            common = _shared(train_ids, ids)
            if common:
                raise PolicyRefusal(
                    f"party {name!r} refused to score {key!r}: {common} of its rows are training rows (the logit "
                    "of a training row is a per-row function of that protected row, not post-processing of the DP "
                    "model); score only new records, in a file of their own (--data new=FILE)")
    if loss != "logistic":
        try:
            if loss != xm.LOSS:
                loss, huber_kappa = xr.check_loss(loss, huber_kappa)
        except InvalidParameterError as e:
            raise PolicyRefusal(f"party {name!r} refused the run: {e}") from None
        if model is not None:
            raise PolicyRefusal(f"party {name!r} refused the run: scoring with a model file is for the binary target "
                                "(a regression or multiclass expert is scored in the run that fits it)")
        if flip_probability is not None:
            raise PolicyRefusal(f"party {name!r} refused the run: a flip probability is for ±1 labels, not a "
                                f"{'multiclass' if loss == xm.LOSS else 'regression'} target")
    cfg = ExpertConfig(str(name), _block(train), {str(k): _block(v) for k, v in score.items()}, R, lam,
                       noise_multiplier, noise_norm, model, bounds, range_noise_multiplier, str(loss),
                       float(huber_kappa))
    if (model is None and cfg.X is None) or any(X is None for X in cfg.score.values()):
        raise PolicyRefusal(f"party {name!r} refused the run: a block it fits or scores must be read with its "
                            "features (ids_only is for the training ids of a scoring run)", "INVALID_ARGUMENT")
    if model is None:
        return cfg, ExpertState()
    if not isinstance(model, PartyModel):
        raise ProtocolError(f"party {name!r}: the model must be its own model file (--data model=OUT/model.npz)")
    for key, X in cfg.score.items():
        if X.shape[1] + 1 != model.coef.shape[0]:
            raise InvalidDataError(f"party {name!r}: its {key!r} file has {X.shape[1]} feature columns, its model "
                                   f"{model.coef.shape[0] - 1}; score records with the columns it was trained on.")
    q = _flip_probability(name, "the run", flip_probability)
    return cfg, ExpertState(np.asarray(model.coef, dtype=np.float64), q, {"row_clip": float(R)})


def _same_file(a, b) -> bool:
    pa, pb = getattr(a, "path", None), getattr(b, "path", None)
    try:
        return bool(pa and pb and os.path.samefile(pa, pb))
    except OSError:
        return False


def _shared(train_ids, ids) -> int:
    """How many of ``ids`` are training ids: equal as values (the file's 1 and 1.0) or as text."""
    a, b = pd.Index(np.asarray(ids)), pd.Index(np.asarray(train_ids))
    return int(np.sum(a.isin(b) | a.astype(str).isin(b.astype(str))))


def _flip_probability(name: str, what: str, q) -> float | None:
    """The public flip probability of the labels' randomized response, checked: ``None`` (exact labels) or a
    number in [0, ½) (the de-biasing divides by 1 − 2q)."""
    if q is None:
        return None
    try:
        x = float(q)
    except (TypeError, ValueError):
        x = math.nan
    if not 0.0 <= x < 0.5:  # NaN fails too
        raise PolicyRefusal(f"party {name!r} refused {what}: the flip probability {q!r} must be in [0, 1/2)")
    return x


def fit_step(cfg: ExpertConfig, state: ExpertState, inbox, *, rng: np.random.Generator):
    """Round 0: fit, perturb and keep the coefficient (once per run); reply with public facts only."""
    if cfg.model is not None:
        raise PolicyRefusal(f"party {cfg.name!r} refused a fit in a scoring run (it scores with its model file)")
    if state is not None and state.coef is not None:
        raise PolicyRefusal(f"party {cfg.name!r} refused a second fit in one run (a second release of its model; "
                            "start a new run, priced again, for another)")
    if not isinstance(inbox, FitRequest):
        raise PolicyRefusal(f"party {cfg.name!r} refused the fit: expected the labels (FitRequest), got "
                            f"{type(inbox).__name__}")
    labels = np.asarray(inbox.labels)
    n = cfg.X.shape[0]
    if cfg.loss == xm.LOSS:
        return _fit_multiclass(cfg, inbox, labels, rng)
    if cfg.loss != "logistic":
        return _fit_regression(cfg, inbox, labels, rng)
    if labels.shape != (n,) or labels.dtype.kind not in "biuf" or not np.all(np.abs(labels) == 1.0):
        # the sensitivity proof needs the loss 1-Lipschitz in the score: labels in {−1, +1}, one per row
        raise PolicyRefusal(f"party {cfg.name!r} refused the fit and released nothing: the labels it is sent must be "
                            f"one ±1 per training row ({n}), got shape {labels.shape}")
    q = _flip_probability(cfg.name, "the fit", inbox.flip_probability)
    # its columns bounded first when the Setup says so (a DP range estimate on its own rows, from its own stream)
    prep = prepare_party(cfg.name, cfg.X, bounds=cfg.bounds, R=float(cfg.R),
                         range_noise_multiplier=cfg.range_noise_multiplier,
                         model_noise_multiplier=cfg.noise_multiplier, rng=rng)
    coef, info, events = fit_expert(prep.X, labels.astype(np.float64), R=float(cfg.R), lam=float(cfg.lam),
                                    noise_multiplier=cfg.noise_multiplier, rng=rng, party=cfg.name,
                                    noise_norm=float(cfg.noise_norm))
    facts = {k: float(v) for k, v in info.items()}
    facts["row_clip"] = float(cfg.R)
    return ExpertState(coef, q, facts, prep.lo, prep.hi, dict(info, **public_facts(prep))), facts, prep.events + events


def _fit_regression(cfg: ExpertConfig, inbox: FitRequest, labels, rng):
    """Round 0 of the regression target (:mod:`.regression`): labels one finite number per row (the party clips
    them to [−1, 1] itself), no flip probability; then as the binary fit."""
    n = cfg.X.shape[0]
    if labels.shape != (n,) or labels.dtype.kind not in "biuf" or not np.all(np.isfinite(labels)):
        raise PolicyRefusal(f"party {cfg.name!r} refused the fit and released nothing: the labels it is sent must be "
                            f"one finite number per training row ({n}), got shape {labels.shape}")
    if inbox.flip_probability is not None:
        raise PolicyRefusal(f"party {cfg.name!r} refused the fit: a flip probability is for ±1 labels")
    prep = prepare_party(cfg.name, cfg.X, bounds=cfg.bounds, R=float(cfg.R),
                         range_noise_multiplier=cfg.range_noise_multiplier,
                         model_noise_multiplier=cfg.noise_multiplier, rng=rng)
    coef, info, events = xr.fit_regression_expert(
        prep.X, labels.astype(np.float64), R=float(cfg.R), lam=float(cfg.lam), noise_multiplier=cfg.noise_multiplier,
        rng=rng, party=cfg.name, noise_norm=float(cfg.noise_norm), loss=cfg.loss, kappa=float(cfg.huber_kappa))
    facts = {k: float(v) for k, v in info.items()}
    facts["row_clip"] = float(cfg.R)
    return ExpertState(coef, None, facts, prep.lo, prep.hi, dict(info, **public_facts(prep))), facts, prep.events + events


def _fit_multiclass(cfg: ExpertConfig, inbox: FitRequest, labels, rng):
    """Round 0 of the multiclass target (:mod:`.multiclass`): one row of K ≥ 2 finite targets per training row
    (the party projects them onto the unit ball itself), no flip probability; ONE release of its (d+1)×K model."""
    n = cfg.X.shape[0]
    if labels.ndim != 2 or labels.shape[0] != n or labels.shape[1] < 2 or labels.dtype.kind not in "biuf" \
            or not np.all(np.isfinite(labels)):
        raise PolicyRefusal(f"party {cfg.name!r} refused the fit and released nothing: the targets it is sent must be "
                            f"one finite row of K >= 2 numbers per training row ({n}), got shape {labels.shape}")
    if inbox.flip_probability is not None:
        raise PolicyRefusal(f"party {cfg.name!r} refused the fit: a flip probability is for ±1 labels")
    prep = prepare_party(cfg.name, cfg.X, bounds=cfg.bounds, R=float(cfg.R),
                         range_noise_multiplier=cfg.range_noise_multiplier,
                         model_noise_multiplier=cfg.noise_multiplier, rng=rng)
    coef, info, events = xm.fit_multiclass_expert(
        prep.X, labels.astype(np.float64), R=float(cfg.R), lam=float(cfg.lam), noise_multiplier=cfg.noise_multiplier,
        rng=rng, party=cfg.name, noise_norm=float(cfg.noise_norm))
    facts = {k: float(v) for k, v in info.items()}
    facts["row_clip"] = float(cfg.R)
    return ExpertState(coef, None, facts, prep.lo, prep.hi, dict(info, **public_facts(prep))), facts, prep.events + events


def logit(cfg: ExpertConfig, state: ExpertState, key: str = "test") -> np.ndarray:
    """The party's (de-biased) logit on its rows of the NEW-records file ``key`` (post-processing of its model); for
    a regression target its prediction there, in the scaled label units (:func:`.regression.expert_prediction`)."""
    if state is None or state.coef is None:
        raise ProtocolError(f"party {cfg.name!r} has no model yet: the fit (round 0) comes first")
    if not isinstance(key, str) or key not in cfg.score:
        raise ProtocolError(f"party {cfg.name!r} scores only the new-records files it was set up with "
                            f"{sorted(cfg.score)}, not {key!r} (never its training rows)")
    rows = apply_bounds(cfg.score[key], state.lo, state.hi, float(cfg.R))  # the map of its fit (none: as given)
    if cfg.loss == xm.LOSS:
        return xm.expert_scores(state.coef, rows, float(cfg.R))
    if cfg.loss != "logistic":
        return xr.expert_prediction(state.coef, rows, float(cfg.R))
    return np.asarray(expert_logit(state.coef, rows, float(cfg.R), state.flip_probability), dtype=np.float64)


def simulation_model(cfg: ExpertConfig, state: ExpertState) -> dict:
    """The party's model for an in-process simulation's driver, which holds every party's data anyway: the
    coefficient, the column bounds and the public facts. Not declared: a deployed party never sends its model (the
    driver gives this handler to the simulation's parties only)."""
    if state is None or state.coef is None:
        raise ProtocolError(f"party {cfg.name!r} has no model yet: the fit (round 0) comes first")
    return {"coef": state.coef, "lo": state.lo, "hi": state.hi, "facts": dict(state.prepared or {})}


def model(cfg: ExpertConfig, state: ExpertState) -> np.ndarray:
    """What the party writes to its own directory at Finish (its coefficient; never sent)."""
    return np.asarray(state.coef if state is not None and state.coef is not None else np.zeros(0))


def is_private(cfg: ExpertConfig) -> bool:
    """A fit with noise, or a scoring run with a model from a private fit (its ``model.json`` says so)."""
    return bool(cfg.model.private) if cfg.model is not None else cfg.noise_multiplier is not None
