"""The backend interface: run per-party step functions on payloads; know nothing of algorithms.

A backend hosts one worker per party. Each worker builds its own ``(cfg, state)`` by calling the
party's ``setup`` inside the worker (so data can be loaded where it lives), then runs the
party's pure ``step``/``diagnose`` functions when asked. The engine owns the round loop.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np


@dataclass(frozen=True)
class PartySpec:
    """How to run one party.

    ``setup(*setup_args) -> (cfg, state)`` runs inside the worker; ``step(cfg, state, inbox, *, rng)
    -> (state, outbox, events)``; ``diagnose(cfg, state) -> dict`` gives monitoring values (not
    messages of the protocol). All three must be module-level functions (picklable).
    """

    name: str
    setup: Callable[..., tuple[Any, Any]]
    setup_args: tuple = ()
    step: Callable[..., tuple[Any, Any, list]] = None  # type: ignore[assignment]
    diagnose: Callable[[Any, Any], dict] | None = None
    owner: str = field(default="")


class Backend(ABC):
    """Run parties' steps. Subclasses: in-process (default), process, Ray."""

    name = "backend"

    @abstractmethod
    def start(self, specs: Sequence[PartySpec]) -> None:
        """Create one worker per spec and run its setup."""

    @abstractmethod
    def step(self, inboxes: Mapping[str, Any], rngs: Mapping[str, np.random.Generator]) -> dict[str, tuple[Any, list]]:
        """Run every party's step on its inbox; return ``{name: (outbox, events)}``."""

    @abstractmethod
    def diagnose(self) -> dict[str, dict]:
        """Return every party's diagnostics."""

    @abstractmethod
    def call(self, name: str, fn: Callable, *args) -> Any:
        """Run ``fn(cfg, state, *args)`` at party ``name`` and return its result (e.g. a partial score)."""

    @abstractmethod
    def get_states(self) -> dict[str, Any]:
        """Every party's current state (for checkpoints)."""

    @abstractmethod
    def set_states(self, states: Mapping[str, Any]) -> None:
        """Restore states saved by :meth:`get_states`."""

    def close(self) -> None:
        """Release workers."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
