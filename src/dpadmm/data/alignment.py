"""A party's own id alignment: the ids of its file, the intersection a PSI run left it, and the operator's caps.

What the party runtime consults when a Setup names rows (:func:`setup_rows`: PSI is the only door to membership)
and when a PSI run is set up (:class:`PsiGate`). The PSI protocol itself is :mod:`dpadmm.algorithms.psi`; its
threat model is in that package's docstring.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from ..exceptions import InvalidDataError, InvalidParameterError, ProtocolError
from .parties import _read_csv


# ----------------------------------------------------------------------------- the party's ids
@dataclass(frozen=True, eq=False)
class PartyIds:
    """The id column of one party file (read by the party itself)."""

    path: str
    native: np.ndarray  # ids as pandas read them (the party's join key)
    strings: list  # str(id), the PSI items
    signature: str  # size + mtime of the file: an alignment is for this version of the file


def _signature(path) -> str:
    st = os.stat(path)
    return f"{st.st_size}:{st.st_mtime_ns}"


def read_ids(path, params: Mapping[str, Any] | None = None) -> PartyIds:
    """Party side of ``PartyData(key)`` for PSI: the id column of the party's own CSV (unique ids)."""
    params = dict(params or {})
    id_column = str(params.get("id_column", "id"))
    df = _read_csv(path, "party file")
    if id_column not in df.columns:
        raise InvalidDataError(f"party file {path} has no id column {id_column!r}; its columns are "
                               f"{list(df.columns)[:6]}; pass --id-column.")
    ids = df[id_column]
    if ids.isna().any():
        raise InvalidDataError(f"party file {path} has a missing id; every row needs one.")
    strings = [str(v) for v in ids.to_numpy()]
    if len(set(strings)) != len(strings):
        dup = pd.Series(strings)[pd.Series(strings).duplicated()].iloc[0]
        raise InvalidDataError(f"party file {path} repeats id {dup!r}; ids must be unique per party.")
    return PartyIds(str(path), ids.to_numpy(), strings, _signature(path))


# alignments this party process holds: {file path: (file signature, native ids in the common order)}
_ALIGNED: dict[str, tuple[str, np.ndarray]] = {}


def aligned_ids(path) -> np.ndarray:
    """The party's ids of the intersection, in the common order, for its file ``path`` (set by ``align``)."""
    key = str(path)
    if key not in _ALIGNED:
        raise ProtocolError(f"no PSI alignment for {path}: the coordinator must run PSI (--psi) before a run that "
                            "reads this file aligned")
    sig, ids = _ALIGNED[key]
    if sig != _signature(path):
        del _ALIGNED[key]
        raise ProtocolError(f"{path} changed since its PSI alignment; run PSI again")
    return ids


def setup_rows(party: str, key: str, path, params: Mapping[str, Any]) -> dict:
    """The load parameters of a Setup's ``PartyData(key, params)`` for this party's file ``path``, admitted only
    through a PSI intersection: ``psi=True`` reads the party's own alignment; ids sent as a ``subset`` must all lie
    in the intersection of the last PSI run on this file; ids sent to join in the clear must be exactly the file's.
    Raises :class:`ProtocolError` (naming no id, no path) otherwise."""
    params = dict(params)
    if params.pop("psi", False):  # rows of the PSI intersection, in its order: from this party's own alignment
        try:
            params.update(ids=aligned_ids(path), subset=True)
        except ProtocolError:
            raise ProtocolError(f"party {party!r} has no PSI alignment of its {key!r} file (or the file changed since); "
                                "the coordinator must run PSI (--psi) before a run that reads it aligned") from None
        return params
    if "ids" not in params:
        return params
    sent = pd.Index(np.asarray(params["ids"]).ravel())  # compared as the loader joins them (1.0 is the file's 1)
    if params.get("subset"):
        common = _ALIGNED.get(str(path))
        if common is None or common[0] != _signature(path) or not sent.isin(common[1]).all():
            raise ProtocolError(f"party {party!r} refused the Setup: it names rows of its {key!r} file outside the "
                                "intersection of a PSI run this party took part in; run PSI (--psi) and name rows "
                                "through it")
        return params
    own = read_ids(path, params).native
    if not (sent.isin(own).all() and pd.Index(own).isin(sent).all()):
        raise ProtocolError(f"party {party!r} refused the Setup: the ids it was sent are not exactly the ids of its "
                            f"{key!r} file (a join in the clear needs the same samples on every side); align by PSI "
                            "(--psi) instead")
    return params


@dataclass(frozen=True)
class PsiGate:
    """The operator's limits on PSI (a query of at most ``max_query`` ids; at most ``max_runs`` PSI runs per
    ``period`` seconds, counted in ``path`` across restarts and processes sharing it; None: no limit)."""

    path: Path | None = None
    max_query: int | None = None
    max_runs: int | None = None
    period: float = 86400.0

    def __post_init__(self):
        for name in ("max_query", "max_runs"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or int(v) != v or int(v) < 1):
                raise InvalidParameterError(f"--psi-{name.replace('_', '-')} must be a positive integer, got {v}.")
        if not (self.period > 0):
            raise InvalidParameterError(f"--psi-period must be a positive number of seconds, got {self.period}.")
        if self.max_runs is not None and self.path is None:
            raise InvalidParameterError("a cap on PSI runs per period needs a file to count them in.")

    def admit(self, party: str, client_size) -> dict:
        """Check one PSI Setup (the coordinator announcing ``client_size`` ids) and count it; raises ProtocolError."""
        n = int(client_size)
        if self.max_query is not None and n > self.max_query:
            raise ProtocolError(f"party {party!r} refused PSI: a query of {n} ids, its operator allows at most "
                                f"{self.max_query} (--psi-max-query); query fewer ids")
        if self.max_runs is None:
            return {"psi_query": n}
        now = time.time()
        with _locked(Path(self.path)):
            runs = [t for t in _read_times(Path(self.path)) if now - t < self.period]
            if len(runs) >= self.max_runs:
                raise ProtocolError(f"party {party!r} refused PSI: {len(runs)} PSI runs in the last "
                                    f"{self.period:g} s, its operator allows {self.max_runs} (--psi-max-runs); "
                                    "try again later")
            runs.append(now)
            fd, tmp = tempfile.mkstemp(dir=Path(self.path).parent, prefix=".tmp-")
            with os.fdopen(fd, "w") as fh:
                json.dump({"psi_runs": runs}, fh)
            os.replace(tmp, self.path)
        return {"psi_query": n, "psi_runs_in_period": len(runs), "psi_max_runs": self.max_runs}


@contextlib.contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _read_times(path: Path) -> list[float]:
    try:
        return [float(t) for t in json.loads(path.read_text())["psi_runs"]]
    except FileNotFoundError:
        return []
    except (ValueError, KeyError, TypeError):
        raise ProtocolError("the party's count of PSI runs is unreadable; its operator must restore or delete "
                            "it") from None


def canonical_order(strings: Sequence[str]) -> list[str]:
    """The common order of an intersection: its ids sorted as strings (a function of the set alone)."""
    return sorted(set(strings))


