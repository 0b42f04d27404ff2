"""Transcripts: a record of every message that crosses a party boundary.

The engine calls a :class:`Transcript` (its ``transcript=`` hook) with every payload it hands a
backend or gets back from one — the hub's inboxes and the parties' outboxes (``kind="protocol"``),
the parties' diagnostics when monitoring is on (``kind="monitoring"``: values *not* covered by a
privacy guarantee) — and callers may add their own (``kind="model"`` for coefficients collected
after a fit). A payload is flattened into named leaves (NamedTuple / dataclass fields, dict
keys, list items, joined by dots), and each leaf becomes one record::

    {"round": 3, "kind": "protocol", "sender": "party2", "receiver": "hub", "name": "share",
     "shape": [32561], "dtype": "float64", "bytes": 260488}

(``"values"`` too when ``values=True``). Records stream to a JSONL (``.jsonl``/``.json``) or CSV
(``.csv``) file; :meth:`Transcript.summary` gives the bytes per link per round.
"""

from __future__ import annotations

import csv
import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from ..runtime.messages import describe, flatten  # noqa: F401 (re-exported: their old home)

FIELDS = ("round", "kind", "sender", "receiver", "name", "shape", "dtype", "bytes")


class Transcript:
    """Record every message; call it as ``transcript(round, sender, receiver, message, kind)``.

    Parameters
    ----------
    path : file to stream records to (``.jsonl``/``.json`` → JSON lines, ``.csv`` → CSV), or None to
        keep them in memory only.
    values : also record the values (lists of numbers; large files) — for audits.
    keep : keep records in memory (``.records``); on by default.
    """

    def __init__(self, path: str | os.PathLike | None = None, *, values: bool = False, keep: bool = True) -> None:
        self.path = Path(path) if path is not None else None
        self.values = bool(values)
        self.keep = bool(keep)
        self.records: list[dict] = []
        self._bytes: dict[tuple[str, str, str], dict[int, int]] = defaultdict(lambda: defaultdict(int))
        self._fh = None
        self._csv = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.path, "w", newline="")
            if self.path.suffix.lower() == ".csv":
                cols = list(FIELDS) + (["values"] if self.values else [])
                self._csv = csv.DictWriter(self._fh, fieldnames=cols)
                self._csv.writeheader()

    def __call__(self, round_: int, sender: str, receiver: str, message: Any, kind: str = "protocol") -> None:
        for name, leaf in flatten(message):
            shape, dtype, nbytes = describe(leaf)
            rec = {"round": int(round_), "kind": kind, "sender": sender, "receiver": receiver, "name": name,
                   "shape": shape, "dtype": dtype, "bytes": nbytes}
            if self.values:
                rec["values"] = np.asarray(leaf).tolist() if isinstance(leaf, (np.ndarray, np.generic, int, float)) \
                    else repr(leaf)
            self._bytes[(sender, receiver, kind)][int(round_)] += nbytes
            if self.keep:
                self.records.append(rec)
            if self._csv is not None:
                row = dict(rec, shape="x".join(map(str, shape)))
                if self.values:
                    row["values"] = json.dumps(rec["values"])
                self._csv.writerow(row)
            elif self._fh is not None:
                self._fh.write(json.dumps(rec) + "\n")

    def summary(self) -> dict:
        """Bytes per link and kind (``"party1->hub:protocol"``): total, rounds, mean / max per round."""
        links = {}
        for (s, r, k), per_round in sorted(self._bytes.items()):
            vals = list(per_round.values())
            links[f"{s}->{r}:{k}"] = {"sender": s, "receiver": r, "kind": k,
                                  "rounds": len(vals), "total_bytes": int(sum(vals)),
                                  "bytes_per_round_mean": float(np.mean(vals)) if vals else 0.0,
                                  "bytes_per_round_max": int(max(vals)) if vals else 0}
        return {"file": str(self.path) if self.path else None, "links": links,
                "total_bytes": int(sum(v["total_bytes"] for v in links.values()))}

    def close(self) -> None:
        """Flush and close the file."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None
            self._csv = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def read_transcript(path: str | os.PathLike) -> list[dict]:
    """Load the records of a JSONL or CSV transcript file."""
    p = Path(path)
    if p.suffix.lower() == ".csv":
        with open(p, newline="") as fh:
            rows = list(csv.DictReader(fh))
        for r in rows:
            r["round"] = int(r["round"])
            r["bytes"] = int(r["bytes"])
            r["shape"] = [int(x) for x in r["shape"].split("x")] if r["shape"] else []
        return rows
    with open(p) as fh:
        return [json.loads(line) for line in fh if line.strip()]
