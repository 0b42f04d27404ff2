"""The backend interface: run per-party step functions on payloads; know nothing of algorithms.

A backend hosts one worker per party. Each worker builds a :class:`PartyHost` — the party's
``(cfg, state)``, made by the party's own ``setup`` inside the worker (so data is loaded where it
lives), and the party's own random generator — and answers the engine's commands:

- ``step(inbox, round)``: the party's pure step; the noise it adds is drawn from the party's
  generator, which the driver never sees;
- ``diagnose()``: monitoring values (only when the user turned monitoring on);
- ``request(handler, *args)``: one of the handlers the party *declared* (``PartySpec.handlers``,
  e.g. ``"score"``); anything else is refused with :class:`~dpadmm.exceptions.ProtocolError`;
- ``checkpoint(directory, round)`` / ``restore(directory, round)``: the party writes and reads its
  own state under ``directory/parties/<name>/`` — party state never travels to the driver.

Policy: a party given its operator's :class:`~dpadmm.privacy.policy.PartyPolicy` (a backend's ``policies=``,
with ``party_dir=`` its own directory) is hosted by the party runtime instead
(:class:`~dpadmm.runtime.local.HostedParty`, the runtime every ``dpadmm party serve`` party runs): its Setup is
checked against the policy and priced against its budget, its rounds are served in order within the declaration,
and every call is audited — the same refusals, ledger and audit lines on every backend. :func:`host_party`
chooses. A refusal reaches the caller as :func:`refusal_at_caller` (the gRPC client's ProtocolError).

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..exceptions import DataFileError, InvalidParameterError, ProtocolError
from ..protocol import POSITIONAL_SPEC, Protocol, protocol_for, require_served, setup_record
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


@dataclass(frozen=True)
class PartySpec:
    """How to run one party.

    Build it with :meth:`of`: ``PartySpec.of(PROTOCOL, name, Setup(...))``, from the party's protocol declaration and
    its typed Setup record; the positional form ``PartySpec(name, setup, args, step, ...)`` is deprecated.

    ``setup(**setup_args._asdict()) -> (cfg, state)`` runs inside the worker (``setup_args``: the protocol's Setup
    record, built by name; a positional tuple is the deprecated form); ``step(cfg, state, inbox, *, rng)
    -> (state, outbox, events)``; ``diagnose(cfg, state) -> dict`` gives monitoring values (not
    messages of the protocol); ``handlers`` maps the names of the requests the party answers
    (e.g. ``"score"``) to ``fn(cfg, state, *args)``. All functions must be module-level.
    """

    name: str
    setup: Callable[..., tuple[Any, Any]]
    setup_args: tuple = ()
    step: Callable[..., tuple[Any, Any, list]] = None  # type: ignore[assignment]
    diagnose: Callable[[Any, Any], dict] | None = None
    owner: str = field(default="")
    handlers: Mapping[str, Callable] = field(default_factory=dict)
    #: a party that simulates several (e.g. a block of graph nodes in one worker) lists their stream
    #: indices: in a seeded run its step gets one generator per member, member k's being exactly the
    #: stream ``party_rng(seed, streams[k], t)`` it would get as a party of its own (same numbers batched
    #: or not, on every backend); with party-local entropy it gets its one own generator as usual
    streams: tuple[int, ...] = ()
    #: the party's protocol declaration (:meth:`of` sets it, and derives setup/step/diagnose/handlers from it); a spec
    #: built without one (deprecated: a DeprecationWarning) is matched to its declaration by its step
    #: (:func:`dpadmm.protocol.protocol_for`)
    protocol: Protocol | None = None

    def __post_init__(self):
        if self.protocol is None:
            warnings.warn(POSITIONAL_SPEC, DeprecationWarning, stacklevel=3)  # the caller of PartySpec(...)

    @classmethod
    def of(cls, protocol: Protocol, name: str, setup, *, owner: str = "", streams: tuple = (),
           handlers: Mapping[str, Callable] | None = None) -> "PartySpec":
        """A party of ``protocol`` with its ``setup`` record (``protocol.setup_type``, built by name — e.g.
        ``vertical.messages.Setup(name=..., D=..., options=...)``; a field mapping is checked the same way).
        ``handlers``: the requests this party answers (default: the protocol's declared ones); a simulation's party
        may answer others (e.g. ``coef``, its local model, which a party in another organisation never sends)."""
        return cls(name, protocol.setup, setup_record(protocol, setup), protocol.step, protocol.diagnose, owner=owner,
                   handlers=dict(protocol.handlers if handlers is None else handlers), streams=tuple(streams),
                   protocol=protocol)


def party_checkpoint_path(directory, name: str) -> Path:
    """Where party ``name`` keeps its own checkpoint under a run's checkpoint ``directory``."""
    return Path(directory) / "parties" / name / "state.pkl"


def atomic_pickle(obj, path: Path) -> None:
    """Write ``obj`` to ``path`` atomically (a crash leaves the previous file intact)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".ckpt-")
    with os.fdopen(fd, "wb") as fh:
        pickle.dump(obj, fh, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)


class PartyHost:
    """One party inside its worker: its config and state, its generator, its declared handlers.

    Every backend hosts parties through this class, so the rules (party-local entropy, declared
    handlers only, party-local checkpoints) are written once.
    """

    def __init__(self, spec: PartySpec, index: int, noise_seed: int | None) -> None:
        self.spec = spec
        self.index = int(index)
        self.noise_seed = noise_seed
        # Party-local entropy: drawn here, in the party's worker, from the OS; never sent anywhere.
        self._own_rng = np.random.default_rng() if noise_seed is None else None
        args = spec.setup_args
        # a Setup record by name; a positional tuple (deprecated) as before
        self.cfg, self.state = spec.setup(**args._asdict()) if hasattr(args, "_asdict") else spec.setup(*args)

    @property
    def name(self) -> str:
        return self.spec.name

    def rng(self, round_: int):
        if self._own_rng is not None:
            return self._own_rng
        if self.spec.streams:
            return tuple(party_rng(self.noise_seed, s, round_) for s in self.spec.streams)
        return party_rng(self.noise_seed, self.index, round_)

    def step(self, inbox, round_: int):
        self.state, outbox, events = self.spec.step(self.cfg, self.state, inbox, rng=self.rng(round_))
        return outbox, events

    def diagnose(self):
        return self.spec.diagnose(self.cfg, self.state) if self.spec.diagnose is not None else None

    def request(self, handler: str, *args):
        fn = self.spec.handlers.get(handler) if isinstance(handler, str) else None
        if fn is None:
            raise ProtocolError(
                f"party {self.name!r} refused request {handler!r}: its protocol declares only "
                f"{sorted(self.spec.handlers)}.")
        return fn(self.cfg, self.state, *args)

    def checkpoint(self, directory, round_: int) -> None:
        atomic_pickle({"round": int(round_), "party": self.name, "state": self.state},
                      party_checkpoint_path(directory, self.name))

    def restore(self, directory, round_: int) -> None:
        path = party_checkpoint_path(directory, self.name)
        if not path.is_file():
            raise DataFileError(f"party {self.name!r} has no checkpoint at {path}; resume needs every party's "
                                "own checkpoint from the same run.")
        with open(path, "rb") as fh:
            ck = pickle.load(fh)
        if ck.get("round") != round_ or ck.get("party") != self.name:
            raise DataFileError(f"party {self.name!r}'s checkpoint at {path} is from round {ck.get('round')}, "
                                f"the coordinator's from round {round_}; restore both from the same run.")
        self.state = ck["state"]

    def close(self, completed: bool = False) -> None:
        """Nothing to end: the party keeps no run of its own (see :class:`HostedParty` for one that does)."""


def host_party(spec: PartySpec, index: int, noise_seed: int | None, rounds: int | None = None,
               operator: PartyOperator | None = None):
    """The host of one party inside its worker: :class:`PartyHost` (a simulation party: no policy) or, for a party
    its ``operator`` gave a policy, the party runtime (:class:`~dpadmm.runtime.local.HostedParty`)."""
    if operator is None:
        return PartyHost(spec, index, noise_seed)
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
