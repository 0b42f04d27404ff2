"""The backend interface: run per-party step functions on payloads; know nothing of algorithms.

A backend hosts one worker per party, and every worker hosts its party in the one party runtime
(:class:`~dpadmm.runtime.host.PartyRuntime`, through :func:`host_party`): the party's ``(cfg, state)``, made by
the party's own ``setup`` inside the worker (so data is loaded where it lives), and the party's own random
generator. It answers the engine's commands:

- ``step(inbox, round)``: the party's step, strictly the next round; the noise it adds is drawn from the party's
  generator, which the driver never sees;
- ``diagnose()``: monitoring values (only when the user turned monitoring on);
- ``request(handler, *args)``: one of the handlers the party *declared* (its protocol's ``handlers``, e.g.
  ``"score"``); anything else is refused with :class:`~dpadmm.exceptions.ProtocolError`;
- ``checkpoint(directory, round)`` / ``restore(directory, round)``: the party writes and reads its own state
  (the runtime's checkpoint files, in the runtime's encoding) — party state never travels to the driver.

Policy: a party given its operator's :class:`~dpadmm.privacy.policy.PartyPolicy` (a backend's ``policies=``, with
``party_dir=`` its own directory) runs under it as every ``dpadmm party serve`` party does: its Setup is checked
against the policy and priced against its budget, its rounds are served in order within the declaration, and every
call is audited — the same refusals, ledger and audit lines on every backend. Every other party runs under the
simulation policy (:data:`~dpadmm.privacy.policy.SIMULATION`: no budget, seeded noise and the driver's data
allowed, its checkpoints under the driver's ``directory/parties/<name>/``). A refusal reaches the caller as
:func:`refusal_at_caller` (the gRPC client's ProtocolError).

Randomness [threat model: the coordinator must not be able to remove a party's noise]: with
``noise_seed=None`` every party's generator is ``numpy.random.default_rng()`` created *inside the
party's worker* from the operating system's entropy; nothing about it is sent anywhere. With an
integer ``noise_seed`` (a reproducible simulation — whoever knows the seed can regenerate and
remove the noise) party ``i`` uses ``SeedSequence(noise_seed, spawn_key=(i, round))`` in round
``round``, identically on every backend.
"""

from __future__ import annotations

import os
import pickle
import tempfile
import warnings
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..exceptions import InvalidParameterError, ProtocolError
from ..protocol import POSITIONAL_SPEC, Protocol, protocol_for, require_served, setup_record
from ..protocol.registry import declared_by_step
from ..runtime.local import HostedParty, PartyOperator, party_operators
from ..runtime.seeding import seeded_generator

PARTY_LOCAL = "party-local"
SEEDED = "seeded"


def noise_source(noise_seed: int | None) -> str:
    """``"party-local"`` when every party draws from its own OS entropy, ``"seeded"`` otherwise."""
    return PARTY_LOCAL if noise_seed is None else SEEDED


def party_rng(entropy, index: int, round_: int) -> np.random.Generator:
    """The seeded-simulation stream of party ``index`` in round ``round_`` (backend-independent):
    ``default_rng(SeedSequence(entropy, spawn_key=(index, round_)))``, seeded without rebuilding the SeedSequence
    every round (:mod:`dpadmm.runtime.seeding`: the same stream)."""
    return seeded_generator(entropy, index, round_)


@dataclass(frozen=True, init=False)
class PartySpec:
    """How to run one party: its ``name``, its ``protocol`` declaration, its typed ``setup`` record
    (``protocol.setup_type``), its ``owner`` — and, for a party that simulates several (a block of graph nodes in
    one worker), the ``streams`` of its members: in a seeded run its step gets one generator per member, member k's
    being exactly the stream ``party_rng(seed, streams[k], t)`` it would get as a party of its own (same numbers
    batched or not, on every backend); with party-local entropy it gets its one own generator as usual.

    Build it with :meth:`of`: ``PartySpec.of(PROTOCOL, name, Setup(...))``. The older keywords ``step=``,
    ``diagnose=``, ``handlers=`` (e.g. ``dataclasses.replace(spec, step=planted)``, an audit's planted step) become
    a copy of the declaration with them (a planted step has no batch form); the positional form
    ``PartySpec(name, setup, args, step, ...)`` is deprecated (a DeprecationWarning; matched to its declaration by
    its step). ``setup_args``, ``step``, ``diagnose`` and ``handlers`` read the declaration (old names).
    """

    name: str
    protocol: Protocol
    setup: tuple
    owner: str = ""
    streams: tuple = ()

    def __init__(self, name: str, *args, protocol: Protocol | None = None, setup=None, owner: str = "",
                 streams: tuple = (), step=None, diagnose=None, handlers=None, setup_args=None):
        if args and not isinstance(args[0], Protocol):  # PartySpec(name, setup_fn, args, step, diagnose, owner, ...)
            old = dict(zip(("setup_fn", "setup_args", "step", "diagnose", "owner", "handlers", "streams", "protocol"),
                           args))
            warnings.warn(POSITIONAL_SPEC, DeprecationWarning, stacklevel=2)
            step = old.get("step", step)
            fn, setup_args = old.get("setup_fn"), old.get("setup_args", setup_args)
            protocol = old.get("protocol", protocol) or declared_by_step(step)
            diagnose, handlers = old.get("diagnose", diagnose), old.get("handlers", handlers)
            owner, streams = old.get("owner", owner), old.get("streams", streams)
            if fn is not None and fn is not protocol.setup:
                protocol = replace(protocol, setup=fn)
        elif args:
            given = dict(zip(("protocol", "setup", "owner", "streams"), args))
            protocol, setup = given["protocol"], given.get("setup", setup)
            owner, streams = given.get("owner", owner), given.get("streams", streams)
        if protocol is None:
            raise InvalidParameterError(f"party {name!r} has no protocol; build it with PartySpec.of(PROTOCOL, name, "
                                        "Setup(...)).")
        changes = {k: v for k, v in (("step", step), ("diagnose", diagnose)) if v is not None and
                   v is not getattr(protocol, k)}
        if handlers is not None and dict(handlers) != dict(protocol.handlers):
            changes["handlers"] = dict(handlers)
        if "step" in changes:
            changes["batch_step"] = None  # a planted step is stepped alone
        if changes:
            protocol = replace(protocol, **changes)
        if setup_args is not None:  # the old keyword (a replace(spec, setup_args=...) too) wins over ``setup``
            setup = setup_args
        record = setup_record(protocol, setup if setup is not None else ())
        for key, value in (("name", name), ("protocol", protocol), ("setup", record), ("owner", owner),
                           ("streams", tuple(streams))):
            object.__setattr__(self, key, value)

    @classmethod
    def of(cls, protocol: Protocol, name: str, setup, *, owner: str = "", streams: tuple = (),
           handlers: Mapping[str, Callable] | None = None) -> "PartySpec":
        """A party of ``protocol`` with its ``setup`` record (``protocol.setup_type``, built by name — e.g.
        ``vertical.messages.Setup(name=..., D=..., options=...)``; a field mapping is checked the same way).
        ``handlers``: the requests this party answers (default: the protocol's declared ones); a simulation's party
        may answer others (e.g. ``coef``, its local model, which a party in another organisation never sends)."""
        return cls(name, protocol, setup, owner=owner, streams=streams, handlers=handlers)

    @property
    def setup_args(self) -> tuple:
        """Old name of :attr:`setup`."""
        return self.setup

    @property
    def step(self) -> Callable:
        return self.protocol.step

    @property
    def diagnose(self) -> Callable | None:
        return self.protocol.diagnose

    @property
    def handlers(self) -> Mapping[str, Callable]:
        return self.protocol.handlers


def atomic_pickle(obj, path: Path) -> None:
    """Write ``obj`` to ``path`` atomically (a crash leaves the previous file intact): the coordinator's own
    checkpoint (a party's is the runtime's, :mod:`dpadmm.runtime.checkpoints`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".ckpt-")
    with os.fdopen(fd, "wb") as fh:
        pickle.dump(obj, fh, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)


def host_party(spec: PartySpec, index: int, noise_seed: int | None, rounds: int | None = None,
               operator: PartyOperator | None = None) -> HostedParty:
    """The host of one party inside its worker: the party runtime (:class:`~dpadmm.runtime.local.HostedParty`)
    under its ``operator``'s policy, or the simulation policy without one."""
    return HostedParty(spec, index, noise_seed, rounds, operator)


def refusal_at_caller(party: str, what: str, reason: str) -> ProtocolError:
    """A party's refusal as the caller sees it, on every backend: one :class:`ProtocolError` line naming the party
    (``reason`` as the party wrote it when it names itself) with ``.party`` set."""
    exc = ProtocolError(reason if reason.startswith("party") else f"party {party!r} refused {what}: {reason}")
    exc.party = party
    return exc


class Backend(ABC):
    """Run parties' steps. Subclasses: in-process (default), process, Ray, gRPC.

    Capabilities are declared here (class attributes and methods with defaults), so callers read them rather
    than probe: ``peer_to_peer`` (the parties run the rounds among themselves: :meth:`run_peer_to_peer`),
    ``models_stay_at_parties`` (a party's model is never requested), :meth:`require_protocol`, :meth:`routed`.
    ``operators``: the parties hosted under their operator's policy (``policies=`` of the simulation backends).
    """

    name = "backend"
    #: the parties exchange their round messages among themselves; the engine calls :meth:`run_peer_to_peer`
    peer_to_peer: bool = False
    operators: Mapping[str, PartyOperator] = {}

    @property
    def models_stay_at_parties(self) -> bool:
        """A party's final model stays at the party (it writes it to its own directory; it is never requested):
        parties hosted under their operator's policy, and every party of a deployment backend."""
        return bool(self.operators)

    def _set_policies(self, policies, party_dir) -> None:
        """Host the parties named in ``policies`` (name → PartyPolicy or PartyOperator) under those policies, each
        with its own directory (``party_dir/<name>`` unless its operator gave one)."""
        self.operators = party_operators(policies, party_dir)

    def _check_operators(self, specs: Sequence[PartySpec]) -> None:
        unknown = sorted(set(self.operators) - {s.name for s in specs})
        if unknown:
            raise InvalidParameterError(f"policies name {', '.join(map(repr, unknown))}, which is not a party of this "
                                        f"run; its parties are {', '.join(s.name for s in specs)}.")
        for spec in specs:  # a party under its operator's policy runs what `dpadmm party serve` could, nothing else
            if spec.name in self.operators:
                require_served(protocol_for(spec))

    def require_protocol(self, protocol: str, names: Sequence[str], why: str = "") -> None:
        """Before a run: every party in ``names`` serves ``protocol``, else one clear error. A simulation's parties
        run whatever protocol they are given: nothing to check."""

    def routed(self) -> "Backend | None":
        """A backend to the same parties whose rounds go through the driver (for a protocol without a peer-to-peer
        form), or None: a simulation has no such copy (the caller runs that protocol in-process)."""
        return None

    def run_peer_to_peer(self, rounds: int, *, monitor: bool = False, neighbours=None, **kw) -> dict[str, dict]:
        """Peer to peer: the parties run ``rounds`` rounds among themselves; their final reports (only when
        ``peer_to_peer``)."""
        raise ProtocolError(f"the {self.name} backend has no peer-to-peer mode; its rounds go through the driver.")

    @abstractmethod
    def start(self, specs: Sequence[PartySpec], *, noise_seed: int | None = None, rounds: int | None = None) -> None:
        """Create one worker per spec; the worker runs its setup and makes its own generator. ``rounds``:
        the run's declared number of rounds (sent to parties that price a run at Setup)."""

    @abstractmethod
    def step(self, inboxes: Mapping[str, Any], round_: int) -> dict[str, tuple[Any, list]]:
        """Run every party's step on its inbox; return ``{name: (outbox, events)}``."""

    @abstractmethod
    def diagnose(self) -> dict[str, dict]:
        """Return every party's diagnostics (monitoring; not part of the protocol)."""

    @abstractmethod
    def request(self, name: str, handler: str, *args) -> Any:
        """Ask party ``name`` for a declared ``handler`` (e.g. ``"score"``); undeclared → ProtocolError."""

    @abstractmethod
    def checkpoint(self, directory, round_: int) -> None:
        """Every party writes its own state under ``directory/parties/<name>/``."""

    @abstractmethod
    def restore(self, directory, round_: int) -> dict[str, list] | None:
        """Every party restores its own state written by :meth:`checkpoint` at ``round_``; may return, per
        party, releases made after that checkpoint (released again by the resumed run)."""

    def local_state(self, name: str):
        """The state of simulated party ``name`` (the driver's own memory: an in-process simulation only); a party of
        another worker or under its operator's policy keeps its state (ProtocolError)."""
        raise ProtocolError(f"party {name!r}'s state stays at the party on the {self.name} backend (only an "
                            "in-process simulation's parties share the driver's memory).")

    def local_model(self, name: str):
        """Simulated party ``name``'s local model (its protocol's ``model(cfg, state)``), as :meth:`local_state`."""
        raise ProtocolError(f"party {name!r}'s model stays at the party on the {self.name} backend (only an "
                            "in-process simulation's parties share the driver's memory).")

    @property
    def collects_models(self) -> bool:
        """True when the parties run in the driver's process (a simulation: nothing is private from
        the driver there anyway); False for backends whose parties keep their state to themselves."""
        return False

    def close(self) -> None:
        """Release workers."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
