"""In-process backend: every party's step runs in the caller's process, one after another."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from ..exceptions import PartyFailureError
from .base import Backend, PartySpec


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
        self.specs: dict[str, PartySpec] = {}
        self.cfgs: dict[str, Any] = {}
        self.states: dict[str, Any] = {}

    def start(self, specs: Sequence[PartySpec]) -> None:
        for spec in specs:
            try:
                cfg, state = spec.setup(*spec.setup_args)
            except Exception as exc:
                raise _failure(spec.name, "setup", exc) from exc
            self.specs[spec.name] = spec
            self.cfgs[spec.name] = cfg
            self.states[spec.name] = state

    def step(self, inboxes: Mapping[str, Any], rngs) -> dict[str, tuple[Any, list]]:
        out = {}
        for name, spec in self.specs.items():
            try:
                state, outbox, events = spec.step(self.cfgs[name], self.states[name], inboxes[name], rng=rngs[name])
            except Exception as exc:
                raise _failure(name, "step", exc) from exc
            self.states[name] = state
            out[name] = (outbox, events)
        return out

    def diagnose(self) -> dict[str, dict]:
        out = {}
        for name, spec in self.specs.items():
            if spec.diagnose is not None:
                try:
                    out[name] = spec.diagnose(self.cfgs[name], self.states[name])
                except Exception as exc:
                    raise _failure(name, "diagnose", exc) from exc
        return out

    def call(self, name: str, fn: Callable, *args) -> Any:
        return fn(self.cfgs[name], self.states[name], *args)

    def get_states(self) -> dict[str, Any]:
        return dict(self.states)

    def set_states(self, states: Mapping[str, Any]) -> None:
        self.states.update(states)
