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

import inspect
import sys
import types
import typing
import warnings
from collections import abc
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, NamedTuple

import numpy as np

from ..exceptions import ProtocolError


@dataclass(frozen=True, eq=False)
class Protocol:
    """One algorithm's party-side protocol.

    ``setup(*args) -> (cfg, state)``, ``step(cfg, state, inbox, *, rng) -> (state, outbox, events)``,
    ``diagnose(cfg, state) -> dict`` (monitoring; refused in private runs), ``handlers`` (declared
    requests, ``fn(cfg, state, *args)``), ``types`` (classes allowed in messages and options),
    ``load(path, params) -> value`` (reads the party's own file for a :class:`PartyData`),
    ``describe(path) -> dict`` (public facts about a local file, e.g. its column count),
    ``model(cfg, state) -> ndarray | Mapping[str, ndarray]`` (the final local model the party writes to its own
    directory's ``model.npz``: one array, saved as ``coef``, or named arrays, ``coef`` among them),
    ``private(cfg) -> bool`` (whether this run adds noise: then monitoring is refused),
    ``data_fields`` (the names of the Setup fields that hold the party's data: there the party
    expects a :class:`PartyData` reference, and refuses arrays sent by the coordinator unless its
    operator started it with ``--accept-coordinator-data``, a simulation of a deployment; ``data_args``, their
    positions, is the deprecated spelling),
    ``policy`` (:class:`PolicyHooks`: the party's fields and the coordinator's, the check and the price);
    ``alignment`` marks an id-alignment protocol (:mod:`dpadmm.algorithms.psi`): it releases no value computed
    from features or labels (only what PSI reveals), so privacy budgets and ``--requests`` do not apply;
    ``peer_to_peer`` lets nodes run the protocol without a router (:mod:`dpadmm.backends.grpc_p2p`): the
    party's inbox of a round from the sum of its neighbours' broadcasts, and its broadcast from its outbox;
    ``rounds=False`` marks a protocol without rounds (scoring): a budget prices nothing at its Setup (its
    declared requests' own refusals govern what leaves);
    ``setup_type``: the NamedTuple of ``setup``'s arguments by name (:func:`setup_record`, :func:`check_setup`), declared
    in the algorithm folder's ``messages.py``; a field whose annotation is itself a NamedTuple (a typed options record)
    travels field by field and is checked the same way (a field mapping is built into it by name);
    ``exempt`` (:class:`ExemptMessage` each): the message types a step may send in a private run with no privacy
    event — public keys, ciphertexts under a key the receiver does not hold — each with the reason, which the
    party's audit line records; a private step's message of any other type without an event is refused;
    ``batch_step(cfgs, states, inboxes, rngs) -> [(state, outbox, events), ...] | None``: the same round of several
    parties of this protocol held in one process (the in-process simulation, parties without a policy), stepped
    together — each party's numbers, noise (from its own generator) and events exactly those of ``step`` — or None
    when the round is not one it takes (the backend then steps the parties one by one, and a refusal is theirs).
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
    data_args: tuple = ()  # deprecated: the positions of data_fields
    policy: "PolicyHooks | None" = None
    alignment: bool = False  # an id-alignment protocol (PSI): no feature/label values leave; no budget applies
    peer_to_peer: tuple | None = None  # (inbox(cfg, state, round, neighbour_sum | None), broadcast(outbox) -> array)
    rounds: bool = True  # False: a protocol without rounds (PSI, scoring): nothing to price at Setup
    exempt: tuple = ()  # ExemptMessage each: message types released without a privacy event, and why
    #: the named, typed record of ``setup``'s arguments (a NamedTuple; the algorithm folder's ``Setup``), what the wire
    #: carries field by field; derived from ``setup``'s signature when not declared (every field then of any type)
    setup_type: type | None = None
    batch_step: Callable | None = None  # several local parties' same round at once (in-process simulation)
    data_fields: tuple = ()  # the Setup fields that hold the party's own data (by name)

    def __post_init__(self):
        if self.setup_type is None:  # deprecated: declare the Setup record (a DeprecationWarning names the fix)
            warnings.warn(f"protocol {self.name!r} declares no setup_type; declare its Setup NamedTuple in the "
                          "algorithm's messages.py (Protocol(..., setup_type=Setup))", DeprecationWarning, stacklevel=3)
            object.__setattr__(self, "setup_type", derived_setup_type(self.setup))
        if self.data_args and not self.data_fields:  # deprecated positions -> names
            object.__setattr__(self, "data_fields", tuple(self.setup_type._fields[i] for i in self.data_args))
        unknown = [f for f in self.data_fields if f not in self.setup_type._fields]
        if unknown:
            raise ProtocolError(f"protocol {self.name!r}: data field {unknown[0]!r} is not a field of its Setup "
                                f"({', '.join(self.setup_type._fields)})")


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
    algorithm's folder, with ``setup``'s parameter names and defaults, ``Protocol.setup_type``); the wire carries it
    by name and the party checks it (:func:`check_setup`) before the hooks see it.

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
    """The named, typed view of a protocol's setup arguments: ``args`` itself when it is already a ``setup_type``
    record (what the wire carries), else the record of a positional list (a deprecated local form: build the record
    by name). Too many arguments, or fewer than the required ones, is a :class:`ProtocolError` naming the fields."""
    if isinstance(args, setup_type):
        if any(isinstance(v, Mapping) and _record_type(_hints(setup_type).get(k)) is not None
               for k, v in zip(args._fields, args)):  # a record with an options mapping: its typed record
            return check_setup(setup_type, args._asdict())
        return args
    if isinstance(args, Mapping):
        return check_setup(setup_type, args)
    fields = setup_type._fields
    required = len(fields) - len(setup_type._field_defaults)
    if not required <= len(args) <= len(fields):
        raise ProtocolError(f"{setup_type.__module__}.{setup_type.__qualname__} takes {required} to {len(fields)} "
                            f"setup arguments ({', '.join(fields)}), got {len(args)}; send the declared arguments.")
    return setup_type(*args)


def derived_setup_type(setup: Callable) -> type:
    """A NamedTuple of ``setup``'s parameters (names, defaults, annotations where they resolve) for a protocol
    that declares no ``Setup`` of its own."""
    params = inspect.signature(setup).parameters.values()
    bad = [p.name for p in params if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if bad:
        raise ProtocolError(f"{setup.__module__}.{setup.__qualname__} takes {', '.join(bad)} (*args/**kwargs or "
                            "positional-only): a protocol's setup takes named arguments only; declare its Setup type.")
    try:
        hints = typing.get_type_hints(setup)
    except Exception:  # noqa: BLE001 - an annotation that cannot be resolved: that field takes any type
        hints = {}
    record = NamedTuple(f"{setup.__name__}_Setup", [(p.name, hints.get(p.name, Any)) for p in params])
    record.__module__ = setup.__module__
    record.__new__.__defaults__ = tuple(p.default for p in params if p.default is not p.empty) or None
    record._field_defaults = {p.name: p.default for p in params if p.default is not p.empty}
    module = sys.modules.get(setup.__module__)
    if module is not None and not hasattr(module, record.__qualname__):  # found by name: records and specs pickle
        setattr(module, record.__qualname__, record)
    return getattr(module, record.__qualname__, record) if module is not None else record


def setup_record(protocol: "Protocol", args) -> tuple:
    """``protocol.setup_type`` of ``args``: the record itself, a field mapping, or (deprecated) a positional list."""
    return setup_view(protocol.setup_type, args)


def setup_fields(protocol: "Protocol", args) -> dict:
    """``{field: value}`` of a setup (a record, a mapping, or a positional list): what a Setup message carries."""
    return dict(setup_record(protocol, args)._asdict())


def request_arguments(handler: Callable | None, args) -> dict:
    """``{parameter: value}`` of a declared request's positional ``args`` (after ``cfg, state``): what a Request
    message carries. An undeclared handler (None) gets no arguments: the party refuses it by name anyway."""
    if handler is None:
        return {}
    names = list(inspect.signature(handler).parameters)[2:]
    if len(args) > len(names):
        raise ProtocolError(f"request {handler.__name__!r} takes at most {len(names)} arguments ({', '.join(names)}), "
                            f"got {len(args)}")
    return dict(zip(names, args))


def check_request_arguments(handler: Callable, name: str, arguments, *, positional: bool = False) -> dict:
    """The named ``arguments`` of a Request against the declared handler's parameters (after ``cfg, state``): an
    unknown or missing argument is a :class:`ProtocolError` naming it; so is a request that sent a positional list
    (``positional``)."""
    if positional:
        raise ProtocolError("positional 'args' are not accepted; send its 'arguments' by name")
    params = dict(list(inspect.signature(handler).parameters.items())[2:])
    if not isinstance(arguments, Mapping) or not all(isinstance(k, str) for k in arguments):
        raise ProtocolError(f"request {name!r}'s arguments must be a mapping by name ({', '.join(params)}), "
                            f"got {type(arguments).__name__}")
    unknown = [k for k in arguments if k not in params]
    if unknown:
        raise ProtocolError(f"request {name!r} has no argument {unknown[0]!r} (its arguments: "
                            f"{', '.join(params) or 'none'})")
    missing = [k for k, p in params.items() if p.default is p.empty and k not in arguments]
    if missing:
        raise ProtocolError(f"request {name!r}'s argument {missing[0]!r} is missing")
    return dict(arguments)


def check_setup(setup_type, fields) -> tuple:
    """The ``setup_type`` record of the named ``fields`` a Setup message carried, checked against the declaration:
    an unknown field, a missing required field, or a value of the wrong type (by the record's annotations) is a
    :class:`ProtocolError` naming the field."""
    where = f"{setup_type.__module__}.{setup_type.__qualname__}"
    if not isinstance(fields, Mapping) or not all(isinstance(k, str) for k in fields):
        raise ProtocolError(f"the setup must be a mapping of {where}'s fields by name "
                            f"({', '.join(setup_type._fields)}), got {type(fields).__name__}")
    unknown = [k for k in fields if k not in setup_type._fields]
    if unknown:
        raise ProtocolError(f"setup field {unknown[0]!r} is not a field of {where} ({', '.join(setup_type._fields)}); "
                            "send the declared fields only")
    missing = [k for k in setup_type._fields if k not in fields and k not in setup_type._field_defaults]
    if missing:
        raise ProtocolError(f"setup field {missing[0]!r} of {where} is missing (required: "
                            f"{', '.join(k for k in setup_type._fields if k not in setup_type._field_defaults)})")
    hints = _hints(setup_type)
    values = {}
    for k, v in fields.items():
        hint = hints.get(k, Any)
        record = _record_type(hint)
        if record is not None and isinstance(v, Mapping):  # a typed options record, sent (or given) by name
            v = check_setup(record, v)
        elif record is not None and isinstance(v, record):  # decoded from the wire: its fields checked too
            v = check_setup(record, v._asdict())
        if not _conforms(v, hint):
            raise ProtocolError(f"setup field {k!r} of {where} must be {_hint_text(hint)}, got {type(v).__name__}")
        values[k] = v
    return setup_type(**values)


def _record_type(hint):
    """The NamedTuple type of a typed options field (``Options`` or ``Options | None``), else None."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        found = [h for h in typing.get_args(hint) if _record_type(h) is not None]
        return found[0] if len(found) == 1 else None
    return hint if isinstance(hint, type) and issubclass(hint, tuple) and hasattr(hint, "_fields") else None


_HINTS: dict = {}


def _hints(setup_type) -> dict:
    hints = _HINTS.get(setup_type)
    if hints is None:
        try:
            hints = typing.get_type_hints(setup_type, sys.modules[setup_type.__module__].__dict__)
        except Exception:  # noqa: BLE001 - an annotation that cannot be resolved checks nothing (the setup checks)
            hints = {}
        _HINTS[setup_type] = hints
    return hints


def _conforms(value, hint) -> bool:
    """Whether ``value`` (as the codec decodes it) is of the annotated type; unknown annotations accept anything."""
    if hint is Any or hint is object or isinstance(value, PartyData):  # a reference: the party reads its own data
        return True
    if hint is None or hint is type(None):
        return value is None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_conforms(value, h) for h in typing.get_args(hint))
    if origin is not None:
        hint = origin
    if hint is bool:
        return isinstance(value, (bool, np.bool_))
    if hint is int:
        return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
    if hint is float:
        return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
    if hint in (str, np.ndarray):
        return isinstance(value, hint)
    if hint in (abc.Mapping, dict):
        return isinstance(value, abc.Mapping)
    if hint in (abc.Sequence, list, tuple):
        return isinstance(value, (list, tuple))
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True


def _hint_text(hint) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")
