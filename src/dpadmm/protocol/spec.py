"""Protocols as data (the declaration types; :mod:`.registry` holds the declared ones): what a party started for an algorithm will do, and nothing else.

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

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..exceptions import ProtocolError


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
    declared requests' own refusals govern what leaves);
    ``exempt`` (:class:`ExemptMessage` each): the message types a step may send in a private run with no privacy
    event — public keys, ciphertexts under a key the receiver does not hold — each with the reason, which the
    party's audit line records; a private step's message of any other type without an event is refused.
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
    exempt: tuple = ()  # ExemptMessage each: message types released without a privacy event, and why


@dataclass(frozen=True)
class ExemptMessage:
    """A message type a party's step may send in a private run without a privacy event (``Protocol.exempt``).

    ``message``: the type; ``reason``: why it releases nothing about the data under differential privacy (e.g. "a
    public key", "ciphertexts under the sender's own key") — written to the party's audit line when it is served;
    ``fields``: the fields the reason covers (empty: all); another field that is not None or all zeros makes the
    message an ordinary release again, refused without an event.
    """

    message: type
    reason: str
    fields: tuple = ()



@dataclass(frozen=True, eq=False)
class PolicyHooks:
    """Which Setup fields are the party's policy and which the coordinator may choose, and how a party
    checks and prices a run (``Protocol.policy``; each algorithm folder's ``policy.py`` holds its hooks).

    ``party``: field → the rule the party's :class:`~dpadmm.privacy.policy.PartyPolicy` imposes;
    ``coordinator``: field → why the coordinator's choice cannot weaken the party's guarantee;
    The hooks read the setup arguments through the protocol's typed view (a ``NamedTuple`` named ``Setup`` in the
    algorithm's folder, with ``setup``'s parameter names and defaults, built by :func:`setup_view`); on the wire
    they stay a positional list.

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


def setup_view(setup_type, args):
    """``setup_type(*args)``: the named, typed view of a protocol's positional setup arguments (the wire keeps the
    list). Too many arguments, or fewer than the required ones, is a :class:`ProtocolError` naming the fields."""
    fields = setup_type._fields
    required = len(fields) - len(setup_type._field_defaults)
    if not required <= len(args) <= len(fields):
        raise ProtocolError(f"{setup_type.__module__}.{setup_type.__qualname__} takes {required} to {len(fields)} "
                            f"setup arguments ({', '.join(fields)}), got {len(args)}; send the declared arguments.")
    return setup_type(*args)
