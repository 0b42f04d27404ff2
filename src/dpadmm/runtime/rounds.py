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
from ..privacy.policy import PolicyRefusal as _Refused
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


def next_round(rt, t) -> int:
    """Round ``t`` of party runtime ``rt`` if it may be served now: strictly the next round (Setup: 0, Restore: the
    checkpoint's + 1 — no replayed or negative index, so no zero-cost round is served twice and no schedule is
    indexed from its end, REDTEAM_POLICY R2), within ``max_rounds`` and the rounds declared at Setup; a refusal
    otherwise. Counts the step."""
    if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or t != rt.rounds:
        raise _Refused(f"party {rt.name!r} refused round index {t!r} and sent nothing: the next round is "
                       f"{rt.rounds} (rounds are served once, in order){rt._other_run()}", "INVALID_ARGUMENT")
    t = int(t)
    if rt.max_rounds is not None and (rt.steps >= rt.max_rounds or t >= rt.max_rounds):
        raise _Refused(f"party {rt.name!r} refused round {t + 1}: its operator allows at most "
                       f"{rt.max_rounds} rounds per run (--max-rounds)")
    if rt.declared_rounds is not None and t >= rt.declared_rounds:
        raise _Refused(f"party {rt.name!r} refused round {t + 1} and sent nothing: the coordinator declared "
                       f"{rt.declared_rounds} rounds at Setup")
    rt.steps += 1
    return t


def served(rt, t: int, state, outbox, events) -> dict:
    """The reply of round ``t`` of party runtime ``rt`` whose step gave ``(state, outbox, events)``, after the
    round's checks: a private step's release priced at sensitivity 0 must be all zeros, and the budget is charged
    before the reply leaves (a message with no non-zero number needs no event, nor one the protocol declares
    released without one: ``Protocol.exempt``). The party's state and round advance only then."""
    if rt.private and free_release(events) and not all_zero(outbox):
        raise _Refused(f"party {rt.name!r} refused round {t + 1} and sent nothing: its step priced a non-zero "
                       "message at sensitivity 0 (an un-noised release; only an all-zero message is free)")
    if rt.budget is not None:  # within the run priced at Setup? recorded before the reply leaves (O(1))
        released = rt.private and not all_zero(outbox)
        exempt = exemption(rt.protocol, outbox) if released and not events else None
        note = rt.budget.charge(events, private_step=released and exempt is None, round_=t)
        rt._budget_note = note if exempt is None else dict(note, exempt=exempt)
    rt.state = state
    rt.rounds = t + 1
    return {"outbox": outbox, "events": list(events)}
