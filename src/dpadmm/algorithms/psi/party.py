"""PSI's party side (the PSI server): a fresh ECDH key per setup, the blinded ids, one answered query, one align."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...data.alignment import _ALIGNED, PartyIds, canonical_order
from ...exceptions import MissingDependencyError, ProtocolError

#: the library's set encoding for the setup message: RAW (exact; no false positives)
_STRUCTURE = "RAW"
_FPR = 1e-9  # unused by RAW beyond the library's parameter check


def _psi():
    try:  # optional at import time: the CLI's start-up stays light, and a missing library is one clear line
        import private_set_intersection.python as psi
    except ImportError:
        raise MissingDependencyError("PSI id alignment needs openmined-psi: pip install 'openmined-psi>=2.0'.") from None
    return psi



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

