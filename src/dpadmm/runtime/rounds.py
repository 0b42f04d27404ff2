"""What a party checks of each round it serves, and the seeded simulation's generator.

A private party releases a round only if its step's events say what it released: a message charged at
sensitivity 0 must be exactly 0 (:func:`free_release`, :func:`all_zero`, REDTEAM_POLICY R1). In a seeded
simulation each round's generator is ``default_rng(SeedSequence(seed, spawn_key=(index, round)))`` — the same
stream as :func:`dpadmm.backends.base.party_rng` on every backend.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..privacy.events import GaussianRelease
from .seeding import seeded_generator


class SeededGenerator:
    """A seeded simulation's generator for one round, ``default_rng(SeedSequence(seed, spawn_key=key))`` — the same
    stream — built when the step first draws from it (a step that adds no noise, e.g. a no-op round, does not pay
    the ~20 µs of seeding). Protocol steps use their generator through its methods (``rng.standard_normal(...)``)."""

    __slots__ = ("_seed", "_key", "_gen")

    def __init__(self, seed: int, key: tuple):
        self._seed, self._key, self._gen = seed, key, None

    def __getattr__(self, name):
        gen = self._gen
        if gen is None:
            gen = self._gen = (seeded_generator(self._seed, *self._key) if len(self._key) == 2 else
                               np.random.default_rng(np.random.SeedSequence(self._seed, spawn_key=self._key)))
        return getattr(gen, name)


def free_release(events) -> bool:
    """Whether a step released un-noised at sensitivity 0: free only if the message is exactly 0 (a release with
    σ > 0 at sensitivity 0 is noise around a zero the step itself checks, e.g. ``vertical_sharing.release``)."""
    return any(isinstance(e, GaussianRelease) and not float(e.sensitivity) > 0 and not float(e.sigma) > 0
               for e in events)


def all_zero(obj) -> bool:
    """Every number in a (nested) message is exactly 0 (REDTEAM_POLICY R1: a release charged at sensitivity 0
    must carry nothing; a vector of entries 1e-200 is not nothing)."""
    if type(obj) is np.ndarray:  # the common case, without np.asarray / np.any's Python wrappers
        return obj.dtype.kind in "biufc" and not obj.any()
    if isinstance(obj, (np.ndarray, float, int, np.number)):
        a = np.asarray(obj)
        return a.dtype.kind in "biufc" and not np.any(a)  # other arrays (e.g. strings): not known to be empty
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return all(all_zero(getattr(obj, f.name)) for f in dataclasses.fields(obj))
    if isinstance(obj, dict):
        return all(all_zero(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):  # NamedTuple messages too
        return all(all_zero(v) for v in obj)
    return True  # strings, None: no data-dependent number


def exemption(protocol, outbox) -> str | None:
    """The declared reason (``Protocol.exempt``) why ``outbox`` — one message, or a dict / list of them — is released
    without a privacy event, as ``"Type: reason"``; None when any message in it is not declared so (then it is an
    unaccounted release). A declaration covers its listed fields only: another field that is not None or all zeros
    is not covered."""
    declared = {d.message: d for d in protocol.exempt}
    if not declared:
        return None
    msgs = list(outbox.values()) if isinstance(outbox, dict) else (
        list(outbox) if type(outbox) in (list, tuple) else [outbox])
    reasons = []
    for msg in msgs:
        d = declared.get(type(msg))
        if d is None:
            return None
        if d.fields and not all(v is None or all_zero(v) for k, v in zip(msg._fields, msg) if k not in d.fields):
            return None
        reasons.append(f"{type(msg).__name__}: {d.reason}")
    return "; ".join(dict.fromkeys(reasons)) or None


def holds_arrays(obj) -> bool:
    """Whether a setup argument carries arrays (data the coordinator sent rather than a PartyData reference)."""
    if isinstance(obj, np.ndarray):
        return True
    if isinstance(obj, (list, tuple)):
        return any(holds_arrays(v) for v in obj)
    if isinstance(obj, dict):
        return any(holds_arrays(v) for v in obj.values())
    return False
