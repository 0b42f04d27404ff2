"""The party runtime's two doors to membership (:mod:`dpadmm.algorithms.psi`, "PSI is the only door"): the rows a Setup
may name, and the operator's caps on PSI runs — as refusals of the party's policy (one line, audited as refused)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from ..data.alignment import PsiGate, setup_rows
from ..exceptions import ProtocolError
from .policy import PartyPolicy, PolicyRefusal

PSI_RUNS_NAME = "psi_runs.json"  # in the party's --out: when its PSI runs were set up (the per-period cap)


def admit_rows(party: str, key: str, path, params: Mapping[str, Any]) -> dict:
    """:func:`dpadmm.data.alignment.setup_rows`, refused as the party's policy (the Setup then releases nothing)."""
    try:
        return setup_rows(party, key, path, params)
    except ProtocolError as exc:
        raise PolicyRefusal(str(exc), "FAILED_PRECONDITION") from None


def admit_psi(party: str, policy: PartyPolicy, out, args) -> dict:
    """A PSI Setup (``args``: its Setup record — name, the party's ids, the announced ``client_size``) within its operator's caps; the
    returned record goes to the audit line of the Setup."""
    gate = PsiGate(Path(out) / PSI_RUNS_NAME, policy.psi_max_query, policy.psi_max_runs, policy.psi_period)
    try:
        return gate.admit(party, args.client_size)
    except ProtocolError as exc:
        raise PolicyRefusal(str(exc)) from None
