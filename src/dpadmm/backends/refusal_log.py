"""Refusals of unauthenticated callers, summarised: at most one audit record and one log line per source and kind
per interval, with the count of those in between (docs/redteam-tls-2026-11-24.md, F6).

A caller that never completes a TLS handshake (plaintext, another CA, no certificate) or sends a bad frame is
refused and its connection closed; before this module every such connection wrote one audit record (~250 bytes) and
one log line, so a knocker grew the party's audit log and its operator's log without bound. Now the first refusal
of a source (the caller's address without its port) and kind (the audit method and the reason, numbers blanked:
:func:`kind_of`) is written as before; the next ones
within ``interval`` seconds are only counted, and the first written after the interval — or :meth:`flush`, when the
server stops — says how many were not written one by one. Nothing is lost from the record: every refusal is either
a line or inside a line's count. Sources are tracked up to ``MAX_SOURCES``; beyond, new sources share one summary
key (``*``), so a knocker with many addresses costs one line per interval too.
"""

from __future__ import annotations

import re
import threading
import time

INTERVAL = 60.0  # seconds: one line per source and kind per minute
MAX_SOURCES = 256


class RefusalLimiter:
    """Decides which refusals are written (:meth:`admit`) and keeps the count of the others (thread-safe)."""

    def __init__(self, interval: float | None = None, clock=time.monotonic, max_sources: int = MAX_SOURCES):
        self._interval, self.clock, self.max_sources = interval, clock, int(max_sources)
        self._last: dict = {}  # (source, kind) -> time of its last written line
        self._held: dict = {}  # (source, kind) -> refusals counted since that line
        self._lock = threading.Lock()

    @property
    def interval(self) -> float:
        """Seconds between two lines of one source and kind (None at construction: the module's ``INTERVAL``)."""
        return float(INTERVAL if self._interval is None else self._interval)

    def admit(self, source: str, kind) -> int | None:
        """None: not written (counted); else write it now, noting the returned number of refusals held since the
        source's last line (0: none)."""
        now = self.clock()
        with self._lock:
            key = (source, kind)
            if key not in self._last and len(self._last) >= self.max_sources:
                key = ("*", kind)
            last = self._last.get(key)
            if last is not None and now - last < self.interval:
                self._held[key] = self._held.get(key, 0) + 1
                return None
            self._last[key] = now
            return self._held.pop(key, 0)

    def flush(self) -> list[tuple]:
        """The counts not yet written, as (source, kind, count); cleared."""
        with self._lock:
            out = [(s, k, n) for (s, k), n in self._held.items() if n]
            self._held.clear()
            return out


def kind_of(method: str, detail: str) -> tuple[str, str]:
    """The kind a refusal is counted under: its method and its reason with every number blanked (a frame length, a
    byte count), so that the same refusal repeated is one kind and a different reason gets its own line."""
    return method, re.sub(r"[0-9]+", "#", detail)


def held_note(count: int, source: str, interval: float = INTERVAL) -> str:
    """The suffix of a line written after ``count`` refusals were only counted."""
    if not count:
        return ""
    return (f" (and {count} earlier refusal(s) of this kind from {source or 'this source'} since its last line, "
            f"summarised: at most one line per {interval:g} s)")
