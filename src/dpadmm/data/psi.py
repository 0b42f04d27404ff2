"""Private set intersection (PSI) of the parties' id columns: rows aligned by the intersection only.

Before a vertical run (and before scoring new records) the parties must agree on *which* rows are
the same customers. Joining on an id column in the clear shows each side the other's customer list.
Here the label party's organisation (the coordinator, which holds the label party's ids) and every
party compute the intersection with Google's ECDH-PSI (``openmined-psi``), as declared protocol
messages over the transport the run uses (gRPC with mutual TLS in a deployment):

1. ``Setup`` — the party reads the id column of its own file (``PartyData(key)``) and draws a fresh
   ECDH key from its own entropy (the library's; never sent); the coordinator says how many ids it
   will query (``client_size``);
2. request ``setup_message`` — the party's ids, each hashed to the curve and raised to its key
   (``H(id)^a``), in random order: without ``a`` they are pseudorandom points;
3. request ``respond`` — the coordinator sends its ids blinded with its own key (``H(id)^b``, in its
   order); the party raises them to its key (``H(id)^{ab}``) and returns them. It refuses a query of
   more ids than ``client_size`` announced, or a second query in one setup;
4. the coordinator raises the party's setup points to ``b``, matches, and learns which of *its* ids
   the party holds; over all parties it keeps the common ids ``I``;
5. request ``align`` — the coordinator sends ``I`` (ids in ``I`` only) in the canonical order (sorted
   as strings: an order that is a function of ``I`` alone, so it carries nothing about either file's
   row order). The party checks that every id is its own and that the order is canonical (else it
   refuses and aligns nothing), and keeps, for this file, its rows of ``I`` in that order.

The vertical protocol then reads a party's block with ``PartyData(key, {"psi": True})``: the party
takes the ids from its own alignment (:func:`aligned_ids`), never from the coordinator.

What PSI reveals [threat model, semi-honest ECDH-PSI under DDH in the random-oracle model]:

- the coordinator (PSI client) learns, per party, which of its ids the party holds (so ``I``) and
  the party's set size; nothing about the party's other ids;
- a party (PSI server) learns the coordinator's set size (the number of blinded ids), then ``I`` in
  step 5 — the intersection, which every party of a vertical run must know to align its rows;
  nothing about the coordinator's ids outside ``I``;
- the intersection itself is not differentially private (membership of a record in ``I`` is
  revealed); the DP guarantees of the training run are about the aligned rows' features and labels.
- a malicious coordinator can put any ids in its query and so test membership of up to
  ``client_size`` ids of its choice (inherent to PSI with an output; the size is in the party's
  audit log). A party that is told an id it does not hold in step 5 refuses (it reveals nothing
  new: the coordinator learned the answer in step 4).

PSI is the only door to membership (what a party's runtime calls, :func:`setup_rows` and :class:`PsiGate`):

- a Setup names rows only through the intersection of a PSI run this party took part in: ``psi=True``
  (the party's own alignment), or ids that all lie in it; a Setup naming other ids as a subset is refused
  without saying which; a Setup that joins on ids in the clear (no ``subset``) must name exactly the party's
  ids (the refusal names none of them: one bit, "the sets differ", per Setup);
- one ``align`` per PSI query, whatever it answers (a refused align spends the query): the coordinator
  cannot probe ids it never queried one ``align`` at a time;
- the operator caps a query's size (``psi_max_query``) and the number of PSI runs per period
  (``psi_max_runs`` per ``psi_period`` seconds), both recorded with the party's policy in its audit log;
  what remains is the intersection of each run and both set sizes.

Ids are compared as strings (``str(id)`` of the value read from the CSV), so ``7`` in one file and
``7.0`` in another do not match: give both sides the same id format.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from ..exceptions import InvalidDataError, InvalidParameterError, MissingDependencyError, ProtocolError
from .parties import _read_csv

#: the library's set encoding for the setup message: RAW (exact; no false positives)
_STRUCTURE = "RAW"
_FPR = 1e-9  # unused by RAW beyond the library's parameter check


def _psi():
    try:
        import private_set_intersection.python as psi
    except ImportError:
        raise MissingDependencyError("PSI id alignment needs openmined-psi: pip install 'openmined-psi>=2.0'.") from None
    return psi


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


# ----------------------------------------------------------------------------- party side (the PSI server)
@dataclass(eq=False)
class ServerConfig:
    name: str
    ids: PartyIds
    client_size: int
    server: Any = field(repr=False)  # the library's server object, holding this setup's ECDH key


def setup_party(name: str, ids: PartyIds, client_size: int):
    """A fresh ECDH key (from the library's OS-entropy source) and the party's ids; nothing is sent yet."""
    psi = _psi()
    client_size = int(client_size)
    if client_size < 1:
        raise ProtocolError(f"party {name!r} refused PSI: the coordinator announced {client_size} ids")
    cfg = ServerConfig(name, ids, client_size, psi.server.CreateWithNewKey(True))
    return cfg, {"responded": False, "aligned": 0}


def _no_step(cfg, state, inbox, *, rng=None):
    raise ProtocolError(f"party {cfg.name!r}: PSI has no rounds (its messages are the requests setup_message, "
                        "respond, align)")


def setup_message(cfg: ServerConfig, state) -> np.ndarray:
    """The party's blinded ids ``H(id)^a`` (the library shuffles them), as bytes."""
    psi = _psi()
    msg = cfg.server.CreateSetupMessage(_FPR, cfg.client_size, cfg.ids.strings, getattr(psi.DataStructure, _STRUCTURE))
    return np.frombuffer(msg.SerializeToString(), dtype=np.uint8).copy()


def respond(cfg: ServerConfig, state, request: np.ndarray) -> np.ndarray:
    """``H(id)^{ab}`` for the coordinator's blinded ids, in its order (at most ``client_size``, once)."""
    psi = _psi()
    if state["responded"]:
        raise ProtocolError(f"party {cfg.name!r} refused a second PSI query in one setup")
    req = psi.Request()
    try:
        req.ParseFromString(np.asarray(request, dtype=np.uint8).tobytes())
    except Exception:
        raise ProtocolError(f"party {cfg.name!r} refused a malformed PSI request") from None
    n = len(req.encrypted_elements)
    if n > cfg.client_size:
        raise ProtocolError(f"party {cfg.name!r} refused a PSI query of {n} ids (the coordinator announced "
                            f"{cfg.client_size})")
    state["responded"] = True
    resp = cfg.server.ProcessRequest(req)
    return np.frombuffer(resp.SerializeToString(), dtype=np.uint8).copy()


def align(cfg: ServerConfig, state, common) -> dict:
    """Keep this party's rows of the intersection ``common`` in its canonical order (checked here)."""
    if not state["responded"]:
        raise ProtocolError(f"party {cfg.name!r} refused align before a PSI query in this setup")
    if state.get("align_asked"):  # answered or refused, an align spends the query: no probing id by id
        raise ProtocolError(f"party {cfg.name!r} refused a second align in one PSI setup; run PSI again")
    state["align_asked"] = True
    common = [str(s) for s in np.asarray(common).ravel().tolist()]
    if len(common) > cfg.client_size:
        raise ProtocolError(f"party {cfg.name!r} refused align: {len(common)} ids, more than the PSI query held")
    if common != canonical_order(common):
        raise ProtocolError(f"party {cfg.name!r} refused align: the ids are not in the canonical order (sorted, "
                            "distinct) — the order must come from the intersection alone")
    pos = {s: i for i, s in enumerate(cfg.ids.strings)}
    rows = [pos.get(s) for s in common]
    if any(r is None for r in rows):
        raise ProtocolError(f"party {cfg.name!r} refused align: an id is not in its file (not an intersection)")
    _ALIGNED[cfg.ids.path] = (cfg.ids.signature, cfg.ids.native[np.asarray(rows, dtype=np.int64)])
    state["aligned"] = len(rows)
    digest = hashlib.sha256("\n".join(common).encode()).hexdigest()
    return {"rows": len(rows), "sha256": digest}


def _protocol():
    from ..protocol import Protocol

    return Protocol("psi-align", setup_party, _no_step, None,
                    handlers={"setup_message": setup_message, "respond": respond, "align": align},
                    load=read_ids, data_args=(1,), alignment=True, rounds=False)


PROTOCOL = _protocol()


# ----------------------------------------------------------------------------- coordinator side (the PSI client)
@dataclass
class Alignment:
    """What the coordinator learned: ``ids`` (its own id values of the intersection, in the common
    order), ``rows`` (their positions in its file), and per party its set size and overlap."""

    ids: np.ndarray
    rows: np.ndarray
    parties: dict
    digest: str


def align_parties(backend, names: Sequence[str], key: str, ids, *, id_column: str = "id") -> Alignment:
    """Run PSI between the coordinator's ``ids`` and every party in ``names`` for their file ``key``;
    tell each party the intersection in the canonical order. The backend stays open (the caller's run
    follows); the parties keep their alignment for ``PartyData(key, {"psi": True})``."""
    from ..backends.base import PartySpec
    from ..protocol import PartyData

    psi = _psi()
    native = np.asarray(ids)
    strings = [str(v) for v in native.tolist()]
    if len(set(strings)) != len(strings):
        raise InvalidDataError("the label party's ids repeat; ids must be unique per party.")
    if not names:
        raise InvalidParameterError("PSI needs at least one party.")
    handlers = PROTOCOL.handlers
    specs = [PartySpec(name, setup_party, (name, PartyData(key, {"id_column": id_column}), len(strings)), _no_step,
                       handlers=handlers) for name in names]
    backend.start(specs)
    client = psi.client.CreateWithNewKey(True)  # the coordinator's ECDH key, from its own entropy
    request = client.CreateRequest(strings)
    req_bytes = np.frombuffer(request.SerializeToString(), dtype=np.uint8).copy()
    keep = np.ones(len(strings), dtype=bool)
    info = {}
    for name in names:
        setup = psi.ServerSetup()
        setup.ParseFromString(np.asarray(backend.request(name, "setup_message"), dtype=np.uint8).tobytes())
        resp = psi.Response()
        resp.ParseFromString(np.asarray(backend.request(name, "respond", req_bytes), dtype=np.uint8).tobytes())
        hit = np.zeros(len(strings), dtype=bool)
        hit[np.asarray(client.GetIntersection(setup, resp), dtype=np.int64)] = True
        info[name] = {"set_size": len(setup.raw.encrypted_elements), "overlap": int(hit.sum())}
        keep &= hit
    common = canonical_order([strings[i] for i in np.flatnonzero(keep)])
    if not common:
        raise InvalidDataError(f"PSI: the parties' {key} files have no id in common; nothing to align.")
    pos = {s: i for i, s in enumerate(strings)}
    rows = np.array([pos[s] for s in common], dtype=np.int64)
    digests = {}
    for name in names:
        digests[name] = backend.request(name, "align", np.array(common))["sha256"]
    digest = hashlib.sha256("\n".join(common).encode()).hexdigest()
    bad = [n for n, d in digests.items() if d != digest]
    if bad:
        raise ProtocolError(f"PSI: parties {bad} aligned a different intersection")
    return Alignment(native[rows], rows, info, digest)
