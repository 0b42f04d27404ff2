"""In-process backend: every party's step runs in the caller's process, one after another."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from .base import Backend, PartySpec


class InProcessBackend(Backend):
    """The default backend: no serialisation, no copies; same step functions as every backend."""

    name = "inprocess"

    def __init__(self) -> None:
        self.specs: dict[str, PartySpec] = {}
        self.cfgs: dict[str, Any] = {}
        self.states: dict[str, Any] = {}

    def start(self, specs: Sequence[PartySpec]) -> None:
        for spec in specs:
            cfg, state = spec.setup(*spec.setup_args)
            self.specs[spec.name] = spec
            self.cfgs[spec.name] = cfg
            self.states[spec.name] = state

    def step(self, inboxes: Mapping[str, Any], rngs) -> dict[str, tuple[Any, list]]:
        out = {}
        for name, spec in self.specs.items():
            state, outbox, events = spec.step(self.cfgs[name], self.states[name], inboxes[name], rng=rngs[name])
            self.states[name] = state
            out[name] = (outbox, events)
        return out

    def diagnose(self) -> dict[str, dict]:
        return {
            name: spec.diagnose(self.cfgs[name], self.states[name])
            for name, spec in self.specs.items() if spec.diagnose is not None
        }

    def call(self, name: str, fn: Callable, *args) -> Any:
        return fn(self.cfgs[name], self.states[name], *args)

    def get_states(self) -> dict[str, Any]:
        return dict(self.states)

    def set_states(self, states: Mapping[str, Any]) -> None:
        self.states.update(states)
