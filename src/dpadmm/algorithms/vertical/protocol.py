"""The vertical folder's declarations, registered by name: ``vertical-sharing`` (a feature party of ADMM
sharing [Hu]) and ``vertical-scoring`` (a party scoring new records with its own model file); and, declared but not
registered, ``vertical-sgd`` (a party of the non-private SGD baseline [Hu, §5], a simulation only).

Nothing in this folder imports this module: it sits on top, and :mod:`dpadmm.algorithms` imports it so
that the registry (:mod:`dpadmm.protocol.registry`) knows both names.
"""

from __future__ import annotations

from ...protocol.registry import register
from ...protocol.spec import Protocol
from . import scoring, sgd
from .data import describe_party_data, load_party_data
from .label import refit_label_block
from .messages import (
    Bounds, CoordinatorMessage, PartyMessage, PartyState, PrivacySpec, ScoringSetup, SGDSetup, Setup, VerticalOptions,
)
from .party import eval_score, is_private, party_coef, party_diagnostics, party_rank, party_step, setup_party
from .policy import VERTICAL

PROTOCOL = register(Protocol(
    "vertical-sharing", setup_party, party_step, party_diagnostics,
    handlers={"score": eval_score, "rank": party_rank, "refit": refit_label_block},
    types=(CoordinatorMessage, PartyMessage, PartyState, PrivacySpec, Bounds, VerticalOptions),
    load=load_party_data, describe=describe_party_data, model=party_coef, private=is_private,
    data_fields=("D",), policy=VERTICAL, setup_type=Setup))

SCORING_PROTOCOL = register(Protocol(
    "vertical-scoring", scoring.setup_party, scoring.no_step, None, handlers={"score": scoring.score},
    types=(), load=scoring.load, describe=scoring.describe, private=scoring.is_private,
    data_fields=("X", "model"), rounds=False, setup_type=ScoringSetup))

#: the SGD baseline's party (:class:`dpadmm.VerticalSGDClassifier`): a non-private simulation, so it answers ``coef``
#: (its local model); not registered — no party serves it over the network
SGD_PROTOCOL = Protocol(
    "vertical-sgd", sgd.setup_party, sgd.party_step, sgd.party_diagnostics, handlers={"coef": party_coef},
    types=(sgd.SGDInbox, sgd.SGDOutbox, sgd.SGDPartyState), setup_type=SGDSetup)
