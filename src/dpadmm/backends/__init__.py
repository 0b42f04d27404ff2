"""Backends run per-party step functions; they never import algorithms.

``get_backend("inprocess" | "process" | "ray", **options)`` returns an instance. Ray is an optional
extra: without it, ``get_backend("ray")`` raises :class:`~dpadmm.exceptions.MissingDependencyError`
with the install hint.
"""

from __future__ import annotations

from ..exceptions import InvalidParameterError
from ..runtime.local import PartyOperator
from .base import Backend, PartySpec
from .grpc_backend import GrpcBackend
from .inprocess import InProcessBackend
from .multiprocess import ProcessBackend
from .ray import RayBackend
from .transcript import Transcript

BACKENDS = ("inprocess", "process", "ray", "grpc")


def get_backend(backend="inprocess", **options) -> Backend:
    """Return a Backend instance from a name (with its options) or pass an instance through.

    Options: every simulation backend — ``policies`` (``{party: PartyPolicy or PartyOperator}``: those parties
    are hosted by the party runtime under their operator's policy, as ``dpadmm party serve`` parties) and
    ``party_dir`` (each such party's own directory: ``party_dir/<name>``); ``process`` — ``timeout``, ``setup_timeout``, ``start_method``; ``ray`` — ``address``,
    ``party_resources``, ``timeout``, ``setup_timeout``, ``num_cpus``, ``init_kwargs``. Options that
    are ``None`` are ignored (so callers can pass their defaults through).
    """
    if isinstance(backend, Backend):
        return backend
    options = {k: v for k, v in options.items() if v is not None}
    if backend == "inprocess":
        return InProcessBackend(**{k: options[k] for k in ("policies", "party_dir") if k in options})
    if backend == "process":
        options.pop("address", None)
        options.pop("party_resources", None)
        return ProcessBackend(**options)
    if backend == "grpc":
        if "policies" in options or "party_dir" in options:
            raise InvalidParameterError("a gRPC party's policy is its operator's, given where it runs: `dpadmm party "
                                        "serve --policy FILE` (or --max-epsilon/--delta); drop policies/party_dir.")
        return GrpcBackend(**options)
    if backend == "ray":
        return RayBackend(**options)
    raise InvalidParameterError(f"backend must be one of {list(BACKENDS)}, got backend={backend!r}.")


__all__ = ["Backend", "PartySpec", "PartyOperator", "GrpcBackend", "RayBackend", "InProcessBackend", "ProcessBackend", "Transcript", "get_backend", "BACKENDS"]
