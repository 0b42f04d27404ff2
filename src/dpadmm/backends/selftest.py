"""A tiny protocol for checking and benchmarking backends (no algorithm, no data).

Every party holds a vector ``x`` of length ``size``; in round t it receives the hub's mean ``m``,
sets ``x ← ½(x + m) + noise · g`` (``g`` from the party's own stream) and sends ``x`` back; the hub
averages. With ``noise = 0`` and ``size`` small it is a no-op protocol whose cost is pure backend
overhead. ``fault=(party, round, mode)`` makes one party misbehave in one round: ``"raise"`` (an
exception), ``"exit"`` (its process dies — never use it with the in-process backend) or
``"hang"`` (sleeps ``hang_seconds``). All functions are module-level, so every backend can run them.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..engine import Hub
from ..protocol import Protocol
from .base import PartySpec


class Broadcast(NamedTuple):
    """Hub → party: the round number and the current mean."""

    round: int
    mean: np.ndarray


class Report(NamedTuple):
    """Party → hub: the party's vector."""

    x: np.ndarray


@dataclass(frozen=True)
class ToyConfig:
    name: str
    noise: float
    fault: tuple | None
    hang_seconds: float


class ToySetup(NamedTuple):
    """``toy_setup``'s arguments by name."""

    name: str
    size: int
    noise: float = 0.0
    fault: tuple | None = None
    hang_seconds: float = 3600.0


def toy_setup(name: str, size: int, noise: float = 0.0, fault: tuple | None = None, hang_seconds: float = 3600.0):
    """``PartySpec.setup``: a party with ``x = index`` (parsed from a trailing number in the name, else 0)."""
    digits = "".join(ch for ch in name if ch.isdigit())
    x0 = np.full(int(size), float(digits or 0))
    return ToyConfig(name, float(noise), tuple(fault) if fault else None, float(hang_seconds)), x0


def toy_step(cfg: ToyConfig, x: np.ndarray, inbox: Broadcast, *, rng: np.random.Generator):
    """One round: average towards the hub's mean, add the party's own noise."""
    if cfg.fault is not None and cfg.fault[0] == cfg.name and cfg.fault[1] == inbox.round:
        mode = cfg.fault[2]
        if mode == "raise":
            raise RuntimeError(f"injected failure at {cfg.name} in round {inbox.round}")
        if mode == "exit":
            os._exit(3)
        if mode == "hang":
            time.sleep(cfg.hang_seconds)
    new = 0.5 * (x + inbox.mean)
    if cfg.noise:
        new = new + cfg.noise * rng.standard_normal(new.shape)
    return new, Report(new), []


def toy_diagnose(cfg: ToyConfig, x: np.ndarray) -> dict:
    """Monitoring: the party's squared norm."""
    return {"sq": float(x @ x)}


class HubConfig(NamedTuple):
    names: tuple
    size: int


def toy_hub_init(cfg: HubConfig):
    zero = np.zeros(cfg.size)
    return 0, {n: Broadcast(1, zero) for n in cfg.names}


def toy_hub_step(cfg: HubConfig, t: int, outboxes, *, rng):
    mean = sum(outboxes[n].x for n in cfg.names) / len(cfg.names)
    return t + 1, {n: Broadcast(t + 2, mean) for n in cfg.names}, []


def toy_hub_metrics(cfg: HubConfig, t: int, diagnostics) -> dict:
    return {"objective": float(sum(d["sq"] for d in diagnostics.values()))}


def toy_specs(n_parties: int, size: int, *, noise: float = 0.0, fault: tuple | None = None,
              hang_seconds: float = 3600.0):
    """``(hub, specs)`` for ``engine.run``: parties ``p1 … pM``."""
    names = tuple(f"p{i}" for i in range(1, n_parties + 1))
    Setup = PROTOCOL.setup_type
    specs = [PartySpec.of(PROTOCOL, n, Setup(name=n, size=size, noise=noise, fault=fault, hang_seconds=hang_seconds),
                          owner=n)
             for n in names]
    hub = Hub(HubConfig(names, size), toy_hub_init, toy_hub_step, toy_hub_metrics)
    return hub, specs


def _protocol():
    return Protocol("selftest", toy_setup, toy_step, toy_diagnose, handlers={"sq": toy_diagnose},
                    types=(Broadcast, Report), setup_type=ToySetup)


#: the self-test protocol as data, so a ``dpadmm party serve --protocol selftest`` process can run it
PROTOCOL = _protocol()
