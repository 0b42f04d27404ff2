"""Backends run per-party step functions; they never import algorithms.

``get_backend("inprocess" | "process" | "ray")`` returns an instance; Ray is registered only
when installed.
"""

from __future__ import annotations

from .base import Backend, PartySpec
from .inprocess import InProcessBackend

BACKENDS = ("inprocess",)


def get_backend(backend="inprocess", **options) -> Backend:
    """Return a Backend instance from a name or pass an instance through."""
    if isinstance(backend, Backend):
        return backend
    if backend == "inprocess":
        return InProcessBackend()
    from ..exceptions import InvalidParameterError

    raise InvalidParameterError(f"backend must be one of {list(BACKENDS)}, got backend={backend!r}.")


__all__ = ["Backend", "PartySpec", "InProcessBackend", "get_backend", "BACKENDS"]
