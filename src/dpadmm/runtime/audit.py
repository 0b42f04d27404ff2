"""A party's audit log: one JSON line per call it served or refused — never values.

``OUT/audit.jsonl`` gets, once per start, the operator's policy (an opt-out of the budget is on record), then
one line per call: time, party, caller, method, status, the request's byte size, the refusal's or error's one
line, the budget decision, and the names, shapes, dtypes and byte sizes of what the party was sent and what it
answered (:func:`dpadmm.runtime.codec.summary_json`). Every backend's party writes the same lines
(:class:`~dpadmm.runtime.host.PartyRuntime`).
"""

from __future__ import annotations

import datetime
import json
import threading
from pathlib import Path

from ..privacy.policy import PREMISES
from . import codec

AUDIT_NAME = "audit.jsonl"


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")


class AuditLog:
    """The append-only audit file of party ``party`` in directory ``out`` (whole lines, from any thread)."""

    def __init__(self, out: Path, party: str, policy) -> None:
        self.party = party
        self.path = Path(out) / AUDIT_NAME
        self._file = open(self.path, "a", buffering=1)
        self._lock = threading.Lock()
        self._fixed: dict = {}  # (peer, method, status) -> the audit line's text of those fields
        self._file.write(json.dumps({
            "time": _now(), "party": party, "method": "Start", "status": "ok", "policy": policy.to_dict(),
            "detail": ("privacy budget: " + (f"ε ≤ {policy.max_epsilon:g} at δ = {policy.delta:g}"
                                             if policy.budgeted else "NONE (no ledger; the coordinator's report "
                                                                     "is the only account)")
                       + "".join(f"; premise accepted by its operator: its guarantee holds only {PREMISES[n]}"
                                 for n in getattr(policy, "accept_premises", ())))}) + "\n")

    def write(self, peer: str, method: str, status: str, detail: str = "", request=None, reply=None,
              nbytes: int = 0, budget: dict | None = None) -> None:
        # the same line as json.dumps(rec) for rec = {"time", "party", "peer", "method", "status", "request_bytes",
        # ["detail"], ["budget"], ["request"], ["reply"]} (request/reply: codec.summarize(...)), built from cached
        # texts: the fixed fields' (a run repeats a few callers, methods and statuses) and the summaries'
        # (codec.summary_json: a run repeats a few message structures)
        key = (peer, method, status)
        fixed = self._fixed.get(key)
        if fixed is None:
            fixed = json.dumps({"party": self.party, "peer": peer, "method": method, "status": status,
                                "request_bytes": 0})[1:-1].rpartition(" ")[0] + " "
            if len(self._fixed) < 256:
                self._fixed[key] = fixed
        parts = ['{"time": "', _now(), '", ', fixed, str(int(nbytes))]
        if detail:
            parts.append(', "detail": ' + json.dumps(detail))
        if budget is not None:  # the party's own budget decision (allowed/refused, ε before/after, cap)
            parts.append(', "budget": ' + json.dumps(budget))
        if request is not None:
            parts.append(', "request": ' + codec.summary_json(request))
        if reply is not None:
            parts.append(', "reply": ' + codec.summary_json(reply))
        parts.append("}\n")
        line = "".join(parts)
        with self._lock:  # whole lines: calls (and refused connections) are audited from several threads
            self._file.write(line)

    def close(self) -> None:
        try:
            self._file.close()
        except Exception:
            pass


def state_line(party, method: str, peer: str, reply) -> str | None:
    """The log line for a call that changed the party's state (None for ordinary rounds)."""
    who = peer or "(insecure)"
    if peer not in party._seen_peers:
        party._seen_peers.add(peer)
        first = f"connected: {who}"
    else:
        first = None
    line = None
    if method == "Setup":
        kind = "private" if party.private else "non-private"
        line = f"run started by {who}: protocol {party.protocol.name} ({kind})"
    elif method == "Restore":
        line = (f"run resumed by {who} from this party's checkpoint after round {party.rounds} (next: round "
                f"{party.rounds + 1})")
    elif method == "Finish":
        line = getattr(party, "ended", "") or "run ended"
    return "; ".join(x for x in (first, line) if x) or None


def end_line(protocol: str, completed: bool, has_model: bool, written, set_up: bool) -> str:
    """What a Finish did, in words: a model written, a run that writes none finished, or a run stopped early."""
    if written:
        return f"run ended: wrote {written}"
    if not set_up:
        return "run ended: no run was set up (nothing to write)"
    if not has_model:  # scoring, PSI: the coordinator closes the run when it has its answers (no rounds to complete)
        return f"run finished: {protocol} (a {protocol} run writes no model)"
    return "run ended before completion (stopped by the coordinator): no model written"
