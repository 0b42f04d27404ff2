"""The party runtime inside a simulation backend's worker (in-process, process, Ray): every party there is a
:class:`HostedParty`. A party without an operator runs under the simulation policy
(:data:`~dpadmm.privacy.policy.SIMULATION`: no budget, seeded noise, the driver's data); a party given a :class:`PartyOperator` — its operator's :class:`~dpadmm.privacy.policy.PartyPolicy`, its own
directory and files — runs under that policy: the backend's commands become the runtime's calls
(``Setup`` with the run's declared rounds, ``Step``, ``Request``, ``Diagnose``, ``Checkpoint``, ``Restore``,
``Finish``), so the party checks, prices, refuses and audits exactly as a ``dpadmm party serve`` party does.
The protocol is the spec's declaration (:func:`dpadmm.protocol.protocol_for`); its setup goes by name. Messages
are handed over as objects (the simulation's parties get the spec's own setup arguments: a coordinator's data
is accepted, as ``--accept-coordinator-data`` does for a simulated deployment).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping

from ..exceptions import InvalidParameterError
from ..privacy.ledger_store import configured
from ..privacy.policy import SIMULATION, PartyPolicy
from ..protocol import find_protocol, request_arguments, setup_fields
from . import rounds
from .checkpoints import party_checkpoints
from .host import PartyRuntime


@dataclass(frozen=True)
class PartyOperator:
    """What one party's operator fixes (the coordinator, here the driver, cannot change it).

    ``policy``: its privacy policy (checks, budget, round cap); ``out``: its own directory (audit log, ledger
    across runs, checkpoint, final model; default: the backend's ``party_dir/<name>``); ``data``: its own files
    for :class:`~dpadmm.protocol.PartyData` references; ``allow_monitoring``, ``allow_seeded_noise``,
    ``requests``: as ``dpadmm party serve``'s flags of those names.
    """

    policy: PartyPolicy = field(default_factory=PartyPolicy)
    out: str | None = None
    data: Mapping[str, str] = field(default_factory=dict)
    allow_monitoring: bool = False
    allow_seeded_noise: bool = False
    requests: tuple | None = None


def party_operators(policies, party_dir=None) -> dict[str, PartyOperator]:
    """``{name: PartyOperator}`` from a backend's ``policies`` (name → PartyPolicy or PartyOperator), each with its
    own directory (its ``out``, else ``party_dir/<name>``)."""
    out: dict[str, PartyOperator] = {}
    for name, item in dict(policies or {}).items():
        op = item if isinstance(item, PartyOperator) else PartyOperator(policy=item)
        if not isinstance(op.policy, PartyPolicy):
            raise InvalidParameterError(f"policies[{name!r}] must be a PartyPolicy or a PartyOperator, "
                                        f"got {type(item).__name__}.")
        if op.policy.budgeted and not (op.policy.ledger and op.policy.ledger_key):
            # the organisation's store, resolved here (the workers' environment may be older than the caller's)
            url, key = configured(op.policy.ledger, op.policy.ledger_key)
            op = replace(op, policy=replace(op.policy, ledger=url, ledger_key=key))
        if op.out is None:
            if party_dir is None:
                raise InvalidParameterError(f"party {name!r} has a policy but no directory of its own (its audit log "
                                            "and ledger); give party_dir=DIR (or PartyOperator(out=DIR)).")
            op = replace(op, out=str(Path(party_dir) / name))
        out[name] = op
    return out


class HostedParty:
    """One party inside a backend's worker (in-process, process, Ray): the backend's commands become the party
    runtime's calls. ``operator`` None: a simulated party (:data:`~dpadmm.privacy.policy.SIMULATION`, the spec's own
    declaration, checkpoints in the driver's ``directory/parties/<name>/``); else its operator's policy, directory and
    files, serving the registered declaration of its protocol as ``dpadmm party serve`` does."""

    def __init__(self, spec, index: int, noise_seed: int | None, rounds: int | None,
                 operator: PartyOperator | None = None):
        self.name = spec.name
        if operator is None:
            protocol = spec.protocol
            self.runtime = PartyRuntime(name=spec.name, protocol=protocol, data={}, out=None, policy=SIMULATION)
        else:
            protocol = find_protocol(spec.protocol.name)  # what `dpadmm party serve` runs (require_served checked it)
            self.runtime = PartyRuntime(name=spec.name, protocol=protocol, data=operator.data, out=operator.out,
                                        allow_monitoring=operator.allow_monitoring, accept_coordinator_data=True,
                                        allow_seeded_noise=operator.allow_seeded_noise, requests=operator.requests,
                                        policy=operator.policy)
        self.runtime.streams = tuple(spec.streams)
        setup = {"protocol": protocol.name, "party": spec.name, "index": int(index),
                 "noise_seed": None if noise_seed is None else int(noise_seed), "setup": setup_fields(protocol, spec.setup)}
        if rounds is not None:
            setup["rounds"] = int(rounds)
        try:
            self.runtime.call("Setup", setup)
        except BaseException:
            self.runtime.close()
            raise

    @property
    def simulation(self) -> bool:
        return self.runtime.simulation

    @property
    def cfg(self):
        return self.runtime.cfg

    @property
    def state(self):
        return self.runtime.state

    def step(self, inbox, round_: int):
        reply = self.runtime.call("Step", {"round": round_, "inbox": inbox})
        return reply["outbox"], reply["events"]

    def diagnose(self):
        if self.runtime.protocol.diagnose is None:
            return None
        return self.runtime.call("Diagnose", {})["value"]

    def request(self, handler: str, *args):
        fn = self.runtime.protocol.handlers.get(handler) if isinstance(handler, str) else None
        return self.runtime.call("Request", {"handler": handler, "arguments": request_arguments(fn, args)})["value"]

    def _where(self, directory) -> None:
        if self.runtime.simulation:  # a simulated party keeps its checkpoints in the driver's directory
            self.runtime.checkpoint_dir = party_checkpoints(directory, self.name)

    def checkpoint(self, directory, round_: int) -> None:
        """The party writes its own checkpoint: in its own directory (a simulated party: under the driver's)."""
        self._where(directory)
        self.runtime.call("Checkpoint", {"round": int(round_)})

    def restore(self, directory, round_: int) -> list:
        """Restore the party's own checkpoint; returns what its run released after it (released again)."""
        self._where(directory)
        return list(self.runtime.call("Restore", {"round": int(round_)}).get("released_again") or [])

    def close(self, completed: bool = False) -> None:
        """End the run (a completed one: the party writes its final model to its own directory) and close; a
        simulated party has nothing to end (no directory, no budget) and stays readable (the driver's memory)."""
        if self.runtime.simulation:
            return
        try:
            self.runtime.call("Finish", {"completed": bool(completed)})
        finally:
            self.runtime.close()


def step_together(parties, inboxes, round_: int):
    """Round ``round_`` of several simulated parties of one protocol at once (``Protocol.batch_step``, a runtime
    option their :class:`~dpadmm.privacy.policy.SimulationPolicy` allows): ``{name: (outbox, events)}`` — each party's
    numbers, noise (its own generator), events, round checks and state exactly those of its own Step — or None when
    they cannot be (another policy, a planted step, several streams, another round) or the protocol does not take
    the round (the backend then steps them one by one, where a refusal or failure is the party's)."""
    rts = [p.runtime for p in parties]
    if len(rts) < 2:
        return None
    proto = rts[0].protocol
    if proto.batch_step is None or any(not rt.simulation or rt.cfg is None or rt.streams or rt.rounds != round_
                                       or rt.protocol.batch_step is not proto.batch_step
                                       or rt.protocol.step is not proto.step or
                                       (rt.declared_rounds is not None and round_ >= rt.declared_rounds) for rt in rts):
        return None
    try:
        results = proto.batch_step([rt.cfg for rt in rts], [rt.state for rt in rts], [inboxes[rt.name] for rt in rts],
                                   [rt._generator(round_) for rt in rts])
    except Exception:  # noqa: BLE001 - stepped one by one next, where the failure is the party's
        return None
    if results is None:
        return None
    out = {}
    for rt, (state, outbox, events) in zip(rts, results):
        reply = rounds.served(rt, rounds.next_round(rt, round_), state, outbox, events)
        out[rt.name] = (reply["outbox"], reply["events"])
    return out
