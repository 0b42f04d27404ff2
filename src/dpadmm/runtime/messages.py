"""A message's named leaves: what a transcript records and a party's audit log summarises (never values).

A payload is flattened into named leaves (NamedTuple / dataclass fields, dict keys, list items, joined by
dots); :func:`describe` gives a leaf's shape, dtype and byte size.
"""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any, Iterator

import numpy as np


def flatten(message: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Yield ``(dotted name, leaf)`` for every array or scalar inside ``message``."""
    if message is None:
        return
    if isinstance(message, tuple) and hasattr(message, "_fields"):
        items = zip(message._fields, message)
    elif dataclasses.is_dataclass(message) and not isinstance(message, type):
        items = ((f.name, getattr(message, f.name)) for f in dataclasses.fields(message))
    elif isinstance(message, dict):
        items = ((str(k), v) for k, v in message.items())
    elif isinstance(message, (list, tuple)):
        items = ((str(i), v) for i, v in enumerate(message))
    else:
        yield (prefix or "value"), message
        return
    for key, value in items:
        yield from flatten(value, f"{prefix}.{key}" if prefix else key)


def describe(leaf: Any) -> tuple[list[int], str, int]:
    """``(shape, dtype, bytes)`` of one leaf (payload bytes, without pickling overhead)."""
    if isinstance(leaf, np.ndarray):
        return list(leaf.shape), str(leaf.dtype), int(leaf.nbytes)
    if hasattr(leaf, "tocsr") and hasattr(leaf, "nnz"):  # scipy.sparse
        m = leaf.tocsr()
        return list(m.shape), f"sparse[{m.dtype}]", int(m.data.nbytes + m.indices.nbytes + m.indptr.nbytes)
    if isinstance(leaf, (bool, int, float, complex, np.generic)):
        arr = np.asarray(leaf)
        return [], str(arr.dtype), int(arr.nbytes)
    if isinstance(leaf, (str, bytes)):
        return [len(leaf)], type(leaf).__name__, len(leaf.encode() if isinstance(leaf, str) else leaf)
    return [], type(leaf).__name__, len(pickle.dumps(leaf, protocol=pickle.HIGHEST_PROTOCOL))
