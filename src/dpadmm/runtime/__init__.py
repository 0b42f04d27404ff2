"""The party runtime that every backend hosts: a party's policy, budget, round order, generator and audit log.

- :mod:`~dpadmm.runtime.host`: :class:`PartyRuntime`, the party's state machine, independent of the transport;
- :mod:`~dpadmm.runtime.admission`: what Setup checks before anything is read or released;
- :mod:`~dpadmm.runtime.rounds`: the per-round checks and the seeded simulation's generator;
- :mod:`~dpadmm.runtime.audit`: the party's audit log;
- :mod:`~dpadmm.runtime.local`: the runtime inside a simulation backend's worker (:class:`PartyOperator`);
- :mod:`~dpadmm.runtime.codec`, :mod:`~dpadmm.runtime.messages`: the message encoding and its summaries.
"""

from .host import PartyRuntime
from .local import HostedParty, PartyOperator, party_operators

__all__ = ["PartyRuntime", "HostedParty", "PartyOperator", "party_operators"]
