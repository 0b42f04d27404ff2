"""The protocols a party can serve, by name: ``_PROTOCOLS`` filled by :func:`register`.

Each algorithm folder's ``protocol.py`` declares its ``PROTOCOL`` and calls ``register(PROTOCOL)``;
:mod:`dpadmm.algorithms` imports every folder's ``protocol.py`` explicitly, so importing it fills
the registry with the algorithms (``dpadmm.algorithms.psi`` and ``dpadmm.backends.selftest`` declare
a module-level ``PROTOCOL``, registered when first looked up). This module sits *below* them (they import it), so it cannot import
them back at its top: a lookup first imports, once, the packages in :data:`PROVIDERS` by name — the
one place the registry names its providers, as strings only because they register themselves.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Callable

from ..exceptions import InvalidParameterError
from .spec import Protocol

#: name → declaration; filled by :func:`register` (read it through the functions below)
_PROTOCOLS: dict[str, Protocol] = {}

#: modules whose import registers protocols (the algorithms' folders; PSI; the backends' self-test)
PROVIDERS = ("dpadmm.algorithms", "dpadmm.backends.selftest")


def register(protocol: Protocol) -> Protocol:
    """Add ``protocol`` under its name (the same declaration again is a no-op; another one is an error)."""
    if not isinstance(protocol, Protocol):
        raise InvalidParameterError(f"register() takes a Protocol, got {type(protocol).__name__}.")
    known = _PROTOCOLS.get(protocol.name)
    if known is not None and known is not protocol:
        raise InvalidParameterError(f"protocol {protocol.name!r} is declared twice ({known.step.__module__} and "
                                    f"{protocol.step.__module__}); give the new one its own name.")
    _PROTOCOLS[protocol.name] = protocol
    return protocol


def _declared() -> dict[str, Protocol]:
    for name in PROVIDERS:
        module = importlib.import_module(name)  # a folder registers on first import; a dict lookup afterwards
        declared = getattr(module, "PROTOCOL", None)  # a single-module provider (PSI, the self-test) declares one
        if isinstance(declared, Protocol):
            register(declared)
    return _PROTOCOLS


def protocol_names() -> list[str]:
    """Names a party can be started for."""
    return sorted(_declared())


def find_protocol(name: str) -> Protocol:
    """The declaration named ``name`` (one clear error otherwise)."""
    reg = _declared()
    if name not in reg:
        raise InvalidParameterError(f"unknown protocol {name!r}; a party can serve one of {sorted(reg)}.")
    return reg[name]


#: the DeprecationWarning of a party spec built without its protocol declaration (and of the fallback that matches one
#: back to its declaration by its step): it names the fix
POSITIONAL_SPEC = ("a PartySpec built positionally, PartySpec(name, setup, args, step, ...), without its protocol "
                   "declaration is deprecated; build it as PartySpec.of(PROTOCOL, name, Setup(...)) with the party's "
                   "protocol declaration and its typed Setup record (PROTOCOL.setup_type)")


def require_served(protocol: Protocol) -> Protocol:
    """``protocol`` when a party can serve it (registered by its name), else one clear error: a declaration that is not
    registered (the SGD baseline's) runs in simulations only, never at a party under its operator's rules."""
    if protocol.name not in _declared():
        raise InvalidParameterError(f"protocol {protocol.name!r} is declared for simulations only, so no party serves "
                                    f"it (over the network or under a policy); a party can serve one of "
                                    f"{protocol_names()}.")
    return protocol


def protocol_for(spec) -> Protocol:
    """The declaration a party spec runs: its ``protocol`` (a spec built by ``PartySpec.of(PROTOCOL, ...)`` refers to
    it); a spec built the old way (``PartySpec(name, setup, args, step)``, deprecated: a DeprecationWarning) by its
    step, as before."""
    proto = getattr(spec, "protocol", None)
    if proto is not None:
        return proto
    warnings.warn(POSITIONAL_SPEC, DeprecationWarning, stacklevel=2)
    return _by_step(spec.step)


def protocol_of(step: Callable) -> Protocol:
    """Deprecated (a party spec refers to its declaration: ``PartySpec.of``, :func:`protocol_for`): the declaration
    whose party step is ``step``."""
    warnings.warn(POSITIONAL_SPEC, DeprecationWarning, stacklevel=2)
    return _by_step(step)


def declared_by_step(step: Callable) -> Protocol:
    """The registered declaration whose party step is ``step`` (the deprecated positional party spec's lookup)."""
    return _by_step(step)


def _by_step(step: Callable) -> Protocol:
    for proto in _declared().values():
        if proto.step is step:
            return proto
    raise InvalidParameterError(
        f"{getattr(step, '__module__', '?')}.{getattr(step, '__name__', step)} has no declared protocol, so it "
        f"cannot run over the network; protocols: {protocol_names()}.")
