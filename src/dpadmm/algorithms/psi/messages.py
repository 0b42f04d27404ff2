"""The PSI party's Setup, declared by name (:mod:`.party` serves it)."""

from __future__ import annotations

from typing import NamedTuple

from ...data.alignment import PartyIds


class Setup(NamedTuple):
    """``party.setup_party``'s arguments by name: the party's ids (a PartyData reference to its own file) and the size
    of the client's query."""

    name: str
    ids: PartyIds
    client_size: int
