"""In-process backend: every party's step runs in the caller's process, one after another.

A *simulation*: the parties share the driver's memory, so nothing is private from the driver
here (``collects_models`` is True and estimators may collect local models for ``predict``). The
rules are still those of every backend: each party has its own generator (OS entropy unless a
seed is given), answers only declared handlers, and checkpoints its own state.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..exceptions import PartyFailureError, ProtocolError
from .base import Backend, PartyHost, PartySpec


def _failure(name: str, what: str, exc: Exception) -> PartyFailureError:
    first = str(exc).splitlines()[0] if str(exc) else ""
    reason = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    err = PartyFailureError(f"party {name!r} failed: {reason} (during {what})")
    err.party, err.reason, err.round = name, f"{reason} (during {what})", None
    return err


class InProcessBackend(Backend):
    """The default backend: no serialisation, no copies; same step functions as every backend.

    An exception raised by a party's function surfaces as :class:`PartyFailureError` naming the
    party (the engine adds the round), chained to the original exception.
    """

    name = "inprocess"

    def __init__(self) -> None:
        self.hosts: dict[str, PartyHost] = {}

    @property
    def collects_models(self) -> bool:
        return True

    def start(self, specs: Sequence[PartySpec], *, noise_seed: int | None = None, rounds: int | None = None) -> None:
        self.hosts = {}
        for i, spec in enumerate(specs):
            try:
                self.hosts[spec.name] = PartyHost(spec, i, noise_seed)
            except Exception as exc:
                raise _failure(spec.name, "setup", exc) from exc

    def _each(self, what: str, fn, names=None) -> dict[str, Any]:
        out = {}
        for name in (self.hosts if names is None else names):
            try:
                out[name] = fn(self.hosts[name])
            except ProtocolError:
                raise
            except Exception as exc:
                raise _failure(name, what, exc) from exc
        return out

    def step(self, inboxes: Mapping[str, Any], round_: int) -> dict[str, tuple[Any, list]]:
        return self._each("step", lambda h: h.step(inboxes[h.name], round_))

    def diagnose(self) -> dict[str, dict]:
        out = self._each("diagnose", lambda h: h.diagnose())
        return {k: v for k, v in out.items() if v is not None}

    def request(self, name: str, handler: str, *args) -> Any:
        return self._each(f"request {handler!r}", lambda h: h.request(handler, *args), [name])[name]

    def checkpoint(self, directory, round_: int) -> None:
        self._each("checkpoint", lambda h: h.checkpoint(directory, round_))

    def restore(self, directory, round_: int) -> None:
        self._each("restore", lambda h: h.restore(directory, round_))
