"""The gossip node's Setup, typed to the leaf: the run's public constants as one :class:`GossipOptions` record (sent
field by field and checked at the node, :func:`dpadmm.protocol.check_setup`), beside the node's own data. The
validation stage's messages are :class:`.validation.ValidationRequest` and :class:`.validation.ValidationRelease`
(beside the step that answers them)."""

from __future__ import annotations

from typing import Any, NamedTuple


class GossipOptions(NamedTuple):
    """The run's public constants a node is set up with (the coordinator's choices; the node's policy checks the
    configuration made from them, :mod:`.policy`). ``bounds``: the declared column bounds ``(lo, hi)`` (None: the DP
    column range is computed in ``range_rounds`` rounds); ``average_from``: the gradient round from which the node
    averages its broadcasts (None: the last round)."""

    degree: int
    max_degree: int
    n_nodes: int
    n_total: int
    rounds: int
    range_rounds: int
    noise_multiplier: float
    step: float
    momentum: float
    ridge: float
    row_clip: float
    bounds: tuple | None = None
    average_from: int | None = None
    #: the target (:mod:`.targets`): ``"logistic"`` (binary, the default), ``"squared"``, ``"huber"`` or
    #: ``"multinomial"``; ``classes`` for multinomial; ``huber_delta`` for Huber; ``target_bounds``: the declared
    #: label range of a regression (None: the DP label range is estimated with the column ranges)
    loss: str = "logistic"
    classes: int = 2
    huber_delta: float = 1.0
    target_bounds: tuple | None = None
    #: the DP validation stage (binary, private; :mod:`.validation`): (ε_b, ε_c), the count's and the comparison's ε,
    #: two declared rounds after the last gradient round, priced at Setup (None: no validation at the nodes)
    validation: tuple | None = None


class Setup(NamedTuple):
    """``setup_node``'s arguments by name (the Setup message carries them by name)."""

    name: str
    X: Any  # the node's rows: a PartyData reference to its own file, or an array in a simulation
    y: Any  # its labels, likewise
    options: GossipOptions
