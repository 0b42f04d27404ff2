"""Distributed scoring of new records with a vertical model whose blocks stay at their parties.

After a vertical run each party holds its own block of the model (``model.npz``, written by the
party itself at ``Finish``) and the label party (the coordinator's organisation) holds the
intercept, the weight on the other parties' partial scores and, after a private fit, its own
refitted block (``label_model.npz``). To score new records (the bank's new customers):

1. the parties align the new records' ids — by PSI (:mod:`dpadmm.algorithms.psi`, key ``new``) or by the
   ids the label party already shares with them;
2. each party is started for protocol ``vertical-scoring`` with its own new-records file and its
   own model file (``--data new=FILE --data model=OUT/model.npz``); ``Setup`` reads both (the
   coordinator sends only public loading options: the key, the column count, row normalisation);
3. the declared request ``score`` returns the party's partial score ``X_m,new x_m`` on its aligned
   rows — nothing else is declared: the model and the features never leave the party;
4. the label party adds them up with its own part and the intercept (:func:`combine`).

Privacy: a partial score ``X_new x_m`` is linear in ``x_m``; with as many records as the block has
columns it reveals ``x_m``, and ``x_m`` depends on the party's training features beyond the noisy
shares of a private fit. So when the model comes from a private run (its ``model.json`` says so) a
party refuses ``score`` unless its operator opted in with ``--allow-monitoring`` (un-noised values
outside the guarantee, as for monitoring). The partial scores of a non-private model carry no
guarantee to begin with. The new records themselves are protected by nothing but the parties'
choice to score them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ...exceptions import InvalidDataError, ProtocolError
from .data import describe_party_data, load_party_data


@dataclass(frozen=True)
class PartyModel:
    """A party's own model file: its block ``coef`` and whether the run that made it was private."""

    coef: np.ndarray
    private: bool
    path: str = ""


@dataclass(frozen=True, eq=False)
class ScoringConfig:
    name: str
    X: Any  # the party's aligned rows of the new records (dense or sparse)
    model: PartyModel


def load(path, params: Mapping[str, Any]):
    """Party side of a ``PartyData``: the model file (``*.npz``, with ``model.json`` beside it) or the
    party's new-records CSV (read as for training: aligned by PSI or by the given ids)."""
    p = Path(path)
    if p.suffix == ".npz":
        try:
            coef = np.asarray(np.load(p)["coef"], dtype=np.float64).ravel()
        except Exception as exc:
            raise InvalidDataError(f"model file {p} is not a dpadmm party model ({type(exc).__name__}).") from None
        meta = p.with_suffix(".json")
        private = True  # without its record the party assumes the stricter case
        if meta.is_file():
            try:
                private = bool(json.loads(meta.read_text()).get("private", True))
            except ValueError:
                pass
        return PartyModel(coef, private, str(p))
    return load_party_data(p, params)


def describe(path, id_column: str = "id", label_column: str = "y") -> dict:
    p = Path(path)
    if p.suffix == ".npz":
        return {"model": True}
    return describe_party_data(p, id_column, label_column)


def setup_party(name: str, X, model: PartyModel):
    if not isinstance(model, PartyModel):
        raise ProtocolError(f"party {name!r}: the model must be its own model file (--data model=OUT/model.npz)")
    if X.shape[1] != model.coef.shape[0]:
        raise InvalidDataError(f"party {name!r}: its new-records file has {X.shape[1]} feature columns, its model "
                               f"{model.coef.shape[0]}; score records with the columns the model was trained on.")
    return ScoringConfig(name, X, model), None


def no_step(cfg, state, inbox, *, rng=None):
    raise ProtocolError(f"party {cfg.name!r}: scoring has no rounds (its one message is the request 'score')")


def score(cfg: ScoringConfig, state) -> np.ndarray:
    """The party's partial score ``X_m,new x_m`` on its aligned rows of the new records."""
    return np.asarray(cfg.X @ cfg.model.coef, dtype=np.float64).ravel()


def is_private(cfg: ScoringConfig) -> bool:
    return cfg.model.private


def combine(parts: Mapping[str, np.ndarray], label_model: Mapping[str, Any], label_name: str = "party1",
            label_part: np.ndarray | None = None) -> np.ndarray:
    """The label party's sum: ``own + α Σ_{m ≠ label} s_m + b`` (``own`` = its refitted block's score when it
    refit after a private run, else its party's partial score ``s_label``)."""
    alpha = float(label_model.get("passive_weight", 1.0))
    own = parts[label_name] if label_part is None else label_part
    others = [np.asarray(v) for k, v in parts.items() if k != label_name]
    return np.asarray(own, dtype=np.float64) + alpha * (sum(others) if others else 0.0) \
        + float(label_model.get("intercept", 0.0))
