"""The functional folder's declarations, registered by name: ``functional-quantile`` (a worker of FDP-ADMM
[Zhou]: its own curves to clipped scores on the public basis, then noisy local models) and
``functional-statistics`` (a worker releasing the pooled statistics the hub needs before the fit); and, declared but
not registered, ``functional-quantile-scores`` (the same worker set up from scores already on the basis, a simulation
only).

Nothing in this folder imports this module: it sits on top, and :mod:`dpadmm.algorithms` imports it so
that the registry (:mod:`dpadmm.protocol.registry`) knows both names.
"""

from __future__ import annotations

from ...kernels.fpca import Basis
from ...protocol.registry import register
from ...protocol.spec import Protocol
from . import statistics
from .data import describe_curve_data, load_curve_data
from .messages import FunctionalOptions, HubMessage, PartyMessage, PartyState, ScoresSetup, Settings, Setup
from .party import is_private, party_coef, party_diagnostics, party_step, setup_party, setup_party_from_curves
from .policy import FUNCTIONAL, STATISTICS

# setup: the worker's own curves -> scores on the public basis (a worker reads its own curve file)
PROTOCOL = register(Protocol(
    "functional-quantile", setup_party_from_curves, party_step, party_diagnostics,
    handlers={}, types=(HubMessage, PartyMessage, PartyState, Settings, Basis, FunctionalOptions), model=party_coef,
    private=is_private, data_fields=("X", "y"), load=load_curve_data, describe=describe_curve_data,
    policy=FUNCTIONAL, setup_type=Setup))

STATISTICS_PROTOCOL = register(Protocol(
    "functional-statistics", statistics.setup_stats, statistics.stats_step, None, handlers={},
    types=(statistics.StatsRequest, statistics.StatsMessage, Basis), private=statistics.is_private,
    data_fields=("X", "y"), load=load_curve_data, describe=describe_curve_data, policy=STATISTICS,
    setup_type=statistics.StatsSetup))

#: the worker set up from its scores on the basis (the simulations of [Zhou]'s experiments draw the scores, not the
#: curves: :mod:`dpadmm.experiments.zhou`); not registered — a party serves the curves' form above
SCORES_PROTOCOL = Protocol(
    "functional-quantile-scores", setup_party, party_step, party_diagnostics, handlers={},
    types=(HubMessage, PartyMessage, PartyState, Settings, FunctionalOptions), model=party_coef, private=is_private,
    setup_type=ScoresSetup)
