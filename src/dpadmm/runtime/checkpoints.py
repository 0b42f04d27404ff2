"""A party's own checkpoint files: the last one and the one before, written so that a kill at any instant
leaves at least one whole checkpoint that a Restore can read (the party's runtime decides *what* goes in them and
*which round* it restores; this module only keeps the files whole)."""

from __future__ import annotations

import datetime
import json
import os
import tempfile
from pathlib import Path
from typing import Mapping

import numpy as np

from .._jsonio import atomic_write

CHECKPOINT_NAME = "state.dpadmm"
#: the checkpoint before the last: a coordinator whose checkpoint of round t failed at another party (that party died
#: while the others wrote theirs) resumes from its previous complete checkpoint, which this party still holds
PREVIOUS_CHECKPOINT_NAME = "state.previous.dpadmm"


def install(folder: Path, blob: bytes) -> None:
    """The new checkpoint becomes the last one and the last one the one before. The new one is whole on disk
    (flushed and synced) before any rename; a kill between the two renames leaves only the one before, which is
    then the coordinator's last complete checkpoint (this party never confirmed the new round), and
    :func:`held` still finds it."""
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
    with os.fdopen(fd, "wb") as fh:
        fh.write(blob)
        fh.flush()
        os.fsync(fh.fileno())
    last = folder / CHECKPOINT_NAME
    if last.is_file():
        os.replace(last, folder / PREVIOUS_CHECKPOINT_NAME)
    os.replace(tmp, last)


def party_checkpoints(directory, name: str) -> Path:
    """Where a simulated party ``name`` keeps its own checkpoints under a run's checkpoint ``directory`` (a party
    under its operator's policy keeps them in its own directory's ``checkpoint/``)."""
    return Path(directory) / "parties" / name


def held(folder: Path) -> list[bytes]:
    """The party's checkpoints in ``folder``, the last one first (none, one or two)."""
    return [p.read_bytes() for p in (folder / CHECKPOINT_NAME, folder / PREVIOUS_CHECKPOINT_NAME) if p.is_file()]


def write_model(out: Path, model, meta: dict) -> str:
    """A party's final local model (an array, or named arrays with ``coef`` among them) as ``out/model.npz``, with
    ``model.json`` beside it (``meta`` plus its shape, arrays and time); returns the file's name."""
    arrays = {k: np.asarray(v) for k, v in model.items()} if isinstance(model, Mapping) else {"coef": np.asarray(model)}
    fd, tmp = tempfile.mkstemp(dir=out, prefix=".tmp-", suffix=".npz")
    os.close(fd)
    np.savez(tmp, **arrays)
    os.replace(tmp, out / "model.npz")
    meta = dict(meta, shape=list(np.asarray(arrays["coef"]).shape), arrays=sorted(arrays),
                written=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    atomic_write(out / "model.json", (json.dumps(meta, indent=2) + "\n").encode())
    return "model.npz"
