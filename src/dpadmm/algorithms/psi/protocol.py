"""The PSI declaration: a party started for ``psi-align`` answers its three requests and nothing else."""

from __future__ import annotations

from ...data.alignment import read_ids
from ...protocol import Protocol
from ...protocol.registry import register
from .messages import Setup
from .party import _no_step, align, respond, setup_message, setup_party

PROTOCOL = register(Protocol("psi-align", setup_party, _no_step, None,
                             handlers={"setup_message": setup_message, "respond": respond, "align": align},
                             load=read_ids, data_fields=("ids",), alignment=True, rounds=False,
                             setup_type=Setup))
