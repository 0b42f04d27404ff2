"""Backends run per-party step functions; they never import algorithms.

``get_backend("inprocess" | "process" | "ray", **options)`` returns an instance. Ray is an optional
extra: without it, ``get_backend("ray")`` raises :class:`~dpadmm.exceptions.MissingDependencyError`
with the install hint.
"""

from __future__ import annotations

from .base import Backend, PartySpec
from .inprocess import InProcessBackend
from .multiprocess import ProcessBackend
from .transcript import Transcript

BACKENDS = ("inprocess", "process", "ray", "grpc")


def get_backend(backend="inprocess", **options) -> Backend:
    """Return a Backend instance from a name (with its options) or pass an instance through.

    Options: ``process`` — ``timeout``, ``setup_timeout``, ``start_method``; ``ray`` — ``address``,
    ``party_resources``, ``timeout``, ``setup_timeout``, ``num_cpus``, ``init_kwargs``. Options that
    are ``None`` are ignored (so callers can pass their defaults through).
    """
    if isinstance(backend, Backend):
        return backend
    options = {k: v for k, v in options.items() if v is not None}
    if backend == "inprocess":
        return InProcessBackend()
    if backend == "process":
        options.pop("address", None)
        options.pop("party_resources", None)
        return ProcessBackend(**options)
    if backend == "grpc":
        from .grpc_backend import GrpcBackend

        return GrpcBackend(**options)
    if backend == "ray":
        from .ray import RayBackend

        return RayBackend(**options)
    from ..exceptions import InvalidParameterError

    raise InvalidParameterError(f"backend must be one of {list(BACKENDS)}, got backend={backend!r}.")


__all__ = ["Backend", "PartySpec", "InProcessBackend", "ProcessBackend", "Transcript", "get_backend", "BACKENDS"]
