"""The party runtime's two doors to membership (:mod:`dpadmm.algorithms.psi`, "PSI is the only door"): the rows a Setup
may name, and the operator's caps on PSI runs — as refusals of the party's policy (one line, audited as refused).

The caps (:class:`~dpadmm.privacy.policy.PartyPolicy`: ``psi_max_query`` ids a query, ``psi_max_runs`` queries per
``psi_period``; on by default) are counted per *data set* in the organisation's ledger store
(:mod:`dpadmm.privacy.ledger_store`, a ``psi`` row per query), so every server of a data set answers within them
together; a party without a store counts in its ``--out`` (``psi_runs.json``).

The clear-join check (a Setup naming the ids of the party's file to join in the clear) answers one bit: the whole
run is accepted or refused. It is counted too: a refused check is recorded and closes clear joins *and* PSI on the
data set until the period has passed, every check in between answering the same refusal — so probing ids one guess
at a time learns at most one wrong guess per period (an accepted check reveals nothing the coordinator did not send).
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..data.alignment import PsiGate, setup_rows
from ..exceptions import ProtocolError
from .ledger_store import LedgerTampered
from .policy import PartyPolicy, PolicyRefusal

PSI_RUNS_NAME = "psi_runs.json"  # in the party's --out when it has no store: when its PSI runs were set up


@contextlib.contextmanager
def _refusing():
    """A tampered store refuses the Setup (one line naming what was found), as the budget does."""
    try:
        yield
    except LedgerTampered as exc:
        raise PolicyRefusal(str(exc), "FAILED_PRECONDITION") from None


def _is_clear_join(params: Mapping[str, Any]) -> bool:
    return "ids" in params and not params.get("subset") and not params.get("psi")


def _store_queries(store, data_set: str, period: float):
    """(the rows, the data set's PSI queries within the period, whether a clear join was refused in it)."""
    rows = store.entries(data_set)
    now = time.time()
    recent = [b for _, kind, b, _ in rows if kind == "psi" and now - float(b.get("t", 0)) < period]
    return rows, recent, any(b.get("refused") for b in recent)


def _record(store, data_set: str, rows, kind: str, ids: int, refused: bool) -> None:
    """One ``psi`` row of the data set (a PSI query or a clear-join check), chained after the last row read."""
    after = (rows[-1][0], rows[-1][3]) if rows else (0, "")
    store.append(data_set, "psi", {"t": time.time(), "kind": kind, "ids": ids, "refused": refused}, after)


def _closed(party: str, period: float) -> PolicyRefusal:
    return PolicyRefusal(f"party {party!r} refused the Setup: a clear-join check on this data set was refused in the "
                         f"last {period:g} s, which closes clear joins and PSI on it for the period (--psi-period); "
                         "align by PSI (--psi) once it has passed")


def admit_rows(party: str, key: str, path, params: Mapping[str, Any], *, policy: PartyPolicy | None = None,
               store=None, data_set: str | None = None) -> dict:
    """:func:`dpadmm.data.alignment.setup_rows`, refused as the party's policy (the Setup then releases nothing); a
    clear-join check is counted in the store (see the module's docstring)."""
    if store is None or policy is None or not _is_clear_join(params):
        try:
            return setup_rows(party, key, path, params)
        except ProtocolError as exc:
            raise PolicyRefusal(str(exc), "FAILED_PRECONDITION") from None
    period = float(policy.psi_period)
    refusal = None
    with _refusing(), store.tx():
        rows, _, closed = _store_queries(store, data_set, period)
        if closed:
            refusal = _closed(party, period)
        else:
            try:
                out = setup_rows(party, key, path, params)
            except ProtocolError as exc:
                refusal = PolicyRefusal(str(exc), "FAILED_PRECONDITION")
            _record(store, data_set, rows, "clear-join", int(np.asarray(params["ids"]).size), refusal is not None)
    if refusal is not None:
        raise refusal
    return out


def admit_psi(party: str, policy: PartyPolicy, out, args, *, store=None, data_set: str | None = None) -> dict:
    """A PSI Setup (``args``: its Setup record — name, the party's ids, the announced ``client_size``) within its
    operator's caps; the returned record goes to the audit line of the Setup."""
    if store is None:
        gate = PsiGate(Path(out) / PSI_RUNS_NAME, policy.psi_max_query, policy.psi_max_runs, policy.psi_period)
        try:
            return gate.admit(party, args.client_size)
        except ProtocolError as exc:
            raise PolicyRefusal(str(exc)) from None
    n = int(args.client_size)
    if policy.psi_max_query is not None and n > policy.psi_max_query:
        raise PolicyRefusal(f"party {party!r} refused PSI: a query of {n} ids, its operator allows at most "
                            f"{policy.psi_max_query} (--psi-max-query); query fewer ids")
    period = float(policy.psi_period)
    refusal = None
    with _refusing(), store.tx():
        rows, recent, closed = _store_queries(store, data_set, period)
        if closed:
            refusal = _closed(party, period)
        elif policy.psi_max_runs is not None and len(recent) >= policy.psi_max_runs:
            refusal = PolicyRefusal(f"party {party!r} refused PSI: {len(recent)} PSI queries on this data set in the "
                                    f"last {period:g} s (by every server of the organisation), its operator allows "
                                    f"{policy.psi_max_runs} (--psi-max-runs); try again later")
        else:
            _record(store, data_set, rows, "psi", n, False)
    if refusal is not None:
        raise refusal
    return {"psi_query": n, "psi_runs_in_period": len(recent) + 1, "psi_max_runs": policy.psi_max_runs}
