"""The party runtime inside a simulation backend's worker (in-process, process, Ray).

A party given a :class:`PartyOperator` — its operator's :class:`~dpadmm.privacy.policy.PartyPolicy`, its own
directory and files — is hosted by :class:`HostedParty`: the backend's commands become the runtime's calls
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
from ..privacy.policy import PartyPolicy
from ..protocol import protocol_for, request_arguments, setup_fields
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
    """One party under its operator's rules inside a simulation worker, with :class:`PartyHost`'s interface."""

    def __init__(self, spec, index: int, noise_seed: int | None, rounds: int | None, operator: PartyOperator):
        self.spec = spec
        protocol = protocol_for(spec)
        self.runtime = PartyRuntime(name=spec.name, protocol=protocol, data=operator.data, out=operator.out,
                                    allow_monitoring=operator.allow_monitoring, accept_coordinator_data=True,
                                    allow_seeded_noise=operator.allow_seeded_noise, requests=operator.requests,
                                    policy=operator.policy)
        self.runtime.streams = tuple(spec.streams)
        setup = {"protocol": protocol.name, "party": spec.name, "index": int(index),
                 "noise_seed": None if noise_seed is None else int(noise_seed), "setup": setup_fields(protocol, spec.setup_args)}
        if rounds is not None:
            setup["rounds"] = int(rounds)
        try:
            self.runtime.call("Setup", setup)
        except BaseException:
            self.runtime.close()
            raise

    @property
    def name(self) -> str:
        return self.spec.name

    def step(self, inbox, round_: int):
        reply = self.runtime.call("Step", {"round": round_, "inbox": inbox})
        return reply["outbox"], reply["events"]

    def diagnose(self):
        if self.spec.diagnose is None:
            return None
        return self.runtime.call("Diagnose", {})["value"]

    def request(self, handler: str, *args):
        fn = self.runtime.protocol.handlers.get(handler) if isinstance(handler, str) else None
        return self.runtime.call("Request", {"handler": handler, "arguments": request_arguments(fn, args)})["value"]

    def checkpoint(self, directory, round_: int) -> None:
        """The party writes its own checkpoint in its own directory (``directory`` is the driver's)."""
        self.runtime.call("Checkpoint", {"round": int(round_)})

    def restore(self, directory, round_: int) -> list:
        """Restore the party's own checkpoint; returns what its run released after it (released again)."""
        return list(self.runtime.call("Restore", {"round": int(round_)}).get("released_again") or [])

    def close(self, completed: bool = False) -> None:
        """End the run (a completed one: the party writes its final model to its own directory) and close."""
        try:
            self.runtime.call("Finish", {"completed": bool(completed)})
        finally:
            self.runtime.close()
