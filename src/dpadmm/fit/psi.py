"""PSI's coordinator side (the PSI client): run the alignment with every party over a backend.

A driver (it runs a protocol on a backend), so it sits above the algorithm folders: :mod:`dpadmm.algorithms.psi`
declares what a party does, this module what the coordinator does with the answers.
"""

from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .._progress import status
from ..algorithms.psi.party import _psi
from ..algorithms.psi.protocol import PROTOCOL
from ..backends.base import PartySpec
from ..data.alignment import canonical_order
from ..exceptions import InvalidDataError, InvalidParameterError, ProtocolError
from ..protocol import PartyData


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
    psi = _psi()
    native = np.asarray(ids)
    strings = [str(v) for v in native.tolist()]
    if len(set(strings)) != len(strings):
        raise InvalidDataError("the label party's ids repeat; ids must be unique per party.")
    if not names:
        raise InvalidParameterError("PSI needs at least one party.")
    specs = [PartySpec.of(PROTOCOL, name, PROTOCOL.setup_type(name=name, ids=PartyData(key, {"id_column": id_column}),
                                                             client_size=len(strings))) for name in names]
    status(f"PSI: setting up {len(names)} part{'y' if len(names) == 1 else 'ies'} ({key} file)")
    backend.start(specs)
    status(f"PSI: the parties blind their ids while the coordinator blinds its {len(strings):,}")
    # the parties' setup messages and the coordinator's own blinding are independent: the parties compute theirs
    # (in their processes; the library releases the GIL in-process) while this side blinds its ids. One thread
    # only talks to the backend at a time: the worker until its result is taken, then this thread
    with ThreadPoolExecutor(1, thread_name_prefix="dpadmm-psi") as pool:
        setups = pool.submit(lambda: [backend.request(name, "setup_message") for name in names])
        client = psi.client.CreateWithNewKey(True)  # the coordinator's ECDH key, from its own entropy
        request = client.CreateRequest(strings)
        req_bytes = np.frombuffer(request.SerializeToString(), dtype=np.uint8).copy()
        setup_bytes = setups.result()
    keep = np.ones(len(strings), dtype=bool)
    info = {}
    for i, name in enumerate(names):
        status(f"PSI: party {name} answers the query ({i + 1}/{len(names)})")
        setup = psi.ServerSetup()
        setup.ParseFromString(np.asarray(setup_bytes[i], dtype=np.uint8).tobytes())
        resp = psi.Response()
        resp.ParseFromString(np.asarray(backend.request(name, "respond", req_bytes), dtype=np.uint8).tobytes())
        status(f"PSI: intersecting with party {name} ({i + 1}/{len(names)})")
        hit = np.zeros(len(strings), dtype=bool)
        hit[np.asarray(client.GetIntersection(setup, resp), dtype=np.int64)] = True
        info[name] = {"set_size": len(setup.raw.encrypted_elements), "overlap": int(hit.sum())}
        keep &= hit
    common = canonical_order([strings[i] for i in np.flatnonzero(keep)])
    if not common:
        status("")
        raise InvalidDataError(f"PSI: the parties' {key} files have no id in common; nothing to align.")
    status(f"PSI: the parties align their rows of the {len(common):,} common ids")
    pos = {s: i for i, s in enumerate(strings)}
    rows = np.array([pos[s] for s in common], dtype=np.int64)
    digests = {}
    for name in names:
        digests[name] = backend.request(name, "align", np.array(common))["sha256"]
    status("")
    digest = hashlib.sha256("\n".join(common).encode()).hexdigest()
    bad = [n for n, d in digests.items() if d != digest]
    if bad:
        raise ProtocolError(f"PSI: parties {bad} aligned a different intersection")
    return Alignment(native[rows], rows, info, digest)
