"""Protocols as data: what a party started for an algorithm will do, and nothing else.

An algorithm module declares one :class:`Protocol` (``PROTOCOL = Protocol(...)`` at its end): its
name, the party's setup/step/diagnose functions, the *declared* requests a coordinator may make
(e.g. ``"score"`` for distributed prediction), the message and option types that may cross the
wire, how the party reads its own data file, and what it writes as its final local model.

A party process (``dpadmm party serve --protocol NAME``) looks the declaration up by name and
serves exactly that: the coordinator chooses neither the code the party runs nor the file it
reads. Setup options arrive as data (scalars, names, small public arrays and the allow-listed
types below); wherever the party's own data belongs, the coordinator sends a :class:`PartyData`
reference (a key such as ``"train"`` plus public loading parameters such as the join ids), which
the party replaces by the block it reads from its own file.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from .exceptions import InvalidParameterError, ProtocolError  # noqa: F401  (ProtocolError re-exported)

# modules whose PROTOCOL declarations a party may serve (looked up lazily by name)
PROTOCOL_MODULES = (
    "dpadmm.algorithms.vertical_sharing",
    "dpadmm.algorithms.vertical_scoring",
    "dpadmm.algorithms.vertical_experts",
    "dpadmm.algorithms.encrypted.protocol",
    "dpadmm.algorithms.graph_consensus",
    "dpadmm.algorithms.consensus_baseline",
    "dpadmm.algorithms.functional_quantile",
    "dpadmm.algorithms.functional_statistics",
    "dpadmm.backends.selftest",
    "dpadmm.data.psi",
)


@dataclass(frozen=True, eq=False)
class Protocol:
    """One algorithm's party-side protocol.

    ``setup(*args) -> (cfg, state)``, ``step(cfg, state, inbox, *, rng) -> (state, outbox, events)``,
    ``diagnose(cfg, state) -> dict`` (monitoring; refused in private runs), ``handlers`` (declared
    requests, ``fn(cfg, state, *args)``), ``types`` (classes allowed in messages and options),
    ``load(path, params) -> value`` (reads the party's own file for a :class:`PartyData`),
    ``describe(path) -> dict`` (public facts about a local file, e.g. its column count),
    ``model(cfg, state) -> ndarray`` (the final local model the party writes to its own directory),
    ``private(cfg) -> bool`` (whether this run adds noise: then monitoring is refused),
    ``data_args`` (positions of ``setup``'s arguments that hold the party's data: there the party
    expects a :class:`PartyData` reference, and refuses arrays sent by the coordinator unless its
    operator started it with ``--accept-coordinator-data``, a simulation of a deployment),
    ``policy`` (:class:`PolicyHooks`: the party's fields and the coordinator's, the check and the price);
    ``alignment`` marks an id-alignment protocol (:mod:`dpadmm.data.psi`): it releases no value computed
    from features or labels (only what PSI reveals), so privacy budgets and ``--requests`` do not apply;
    ``peer_to_peer`` lets nodes run the protocol without a router (:mod:`dpadmm.backends.grpc_p2p`): the
    party's inbox of a round from the sum of its neighbours' broadcasts, and its broadcast from its outbox;
    ``rounds=False`` marks a protocol without rounds (scoring): a budget prices nothing at its Setup (its
    declared requests' own refusals govern what leaves).
    """

    name: str
    setup: Callable
    step: Callable
    diagnose: Callable | None = None
    handlers: Mapping[str, Callable] = field(default_factory=dict)
    types: tuple = ()
    load: Callable | None = None
    describe: Callable | None = None
    model: Callable | None = None
    private: Callable | None = None
    data_args: tuple = ()
    policy: "PolicyHooks | None" = None
    alignment: bool = False  # an id-alignment protocol (PSI): no feature/label values leave; no budget applies
    peer_to_peer: tuple | None = None  # (inbox(cfg, state, round, neighbour_sum | None), broadcast(outbox) -> array)
    rounds: bool = True  # False: a protocol without rounds (PSI, scoring): nothing to price at Setup


@dataclass(frozen=True, eq=False)
class PolicyHooks:
    """Which Setup fields are the party's policy and which the coordinator may choose, and how a party
    checks and prices a run (``Protocol.policy``; the hooks live in :mod:`dpadmm.algorithms.policies`).

    ``party``: field → the rule the party's :class:`~dpadmm.privacy.policy.PartyPolicy` imposes;
    ``coordinator``: field → why the coordinator's choice cannot weaken the party's guarantee;
    ``prepare(args, policy) -> args`` imposes the party's values on the setup arguments before setup;
    ``check(cfg, args, policy, party)`` raises a refusal for a field that departs from the policy;
    ``price(cfg, rounds) -> RunPrice``: at most what ``rounds`` rounds of ``cfg`` release.
    """

    party: Mapping[str, str] = field(default_factory=dict)
    coordinator: Mapping[str, str] = field(default_factory=dict)
    prepare: Callable | None = None
    check: Callable | None = None
    price: Callable | None = None


@dataclass(frozen=True)
class PartyData:
    """A reference to data that lives at a party: ``key`` (e.g. ``"train"``, ``"test"``) names one of
    the files the party was started with; ``params`` are public loading parameters (join ids, the
    id/label column names, row normalisation); ``shape`` is what the party reported.

    In the coordinator this is a placeholder with a ``shape`` (estimators treat it as a source read
    by the party); only the party that holds the file can :meth:`load` it.
    """

    key: str
    params: Mapping[str, Any] = field(default_factory=dict)
    shape: tuple = ()

    def load(self):
        raise ProtocolError(f"party data {self.key!r} lives at its party; only that party reads it "
                            "(dpadmm party serve --data KEY=FILE).")


def _registry() -> dict[str, Protocol]:
    out = {}
    for mod in PROTOCOL_MODULES:
        proto = getattr(importlib.import_module(mod), "PROTOCOL", None)
        if isinstance(proto, Protocol):
            out[proto.name] = proto
    return out


def protocol_names() -> list[str]:
    """Names a party can be started for."""
    return sorted(_registry())


def find_protocol(name: str) -> Protocol:
    """The declaration named ``name`` (one clear error otherwise)."""
    reg = _registry()
    if name not in reg:
        raise InvalidParameterError(f"unknown protocol {name!r}; a party can serve one of {sorted(reg)}.")
    return reg[name]


def protocol_of(step: Callable) -> Protocol:
    """The declaration whose party step is ``step`` (how a backend maps a PartySpec to a protocol)."""
    for proto in _registry().values():
        if proto.step is step:
            return proto
    raise InvalidParameterError(
        f"{getattr(step, '__module__', '?')}.{getattr(step, '__name__', step)} has no declared protocol, so it "
        f"cannot run over the network; protocols: {protocol_names()}.")
