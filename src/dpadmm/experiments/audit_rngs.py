"""The audit's generators: the adversary's noiseless replay (:class:`ZeroRNG`) and the planted ones — noise scaled
(:class:`ScaledRNG`), a draw reused (:class:`ReplayRNG`, :class:`RepeatRNG`) — and :func:`planted_generators`, which
plants one of them into every generator of an audited fit (``dpadmm audit --plant``; the plant tests).

A plant here works on the generator a step draws from, not on a line of a protocol: whatever function of the
library turns the draws into noise (a Gaussian, a Gamma radius, a randomized-response flip), the plant reaches it.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from typing import Any, Callable

import numpy as np


class ZeroRNG:
    """A generator that draws zeros: the honest step replayed without noise (the adversary's model)."""

    def standard_normal(self, size=None, dtype=np.float64):
        return np.zeros(() if size is None else size, dtype=dtype)

    def normal(self, loc=0.0, scale=1.0, size=None):
        return np.asarray(loc) + np.zeros(() if size is None else size)


class ScaledRNG:
    """A generator whose noise is multiplied by ``factor`` (plant: noise × factor): standard-normal and normal draws
    times ``factor``, gamma draws (a radius, :func:`dpadmm.privacy.mechanisms.gamma_norm`) at ``factor`` × their
    scale, and uniforms divided by ``factor`` — a Bernoulli(q) decision ``u < q`` (randomized response's flip) then
    fires with probability ``factor · q``."""

    def __init__(self, rng, factor: float):
        self.rng, self.factor = rng, float(factor)

    def standard_normal(self, size=None, dtype=np.float64, out=None):
        z = self.factor * self.rng.standard_normal(size if out is None else out.shape, dtype=dtype)
        if out is None:
            return z
        out[...] = z
        return out

    def normal(self, loc=0.0, scale=1.0, size=None):
        return self.rng.normal(loc, self.factor * np.asarray(scale), size)

    def gamma(self, shape, scale=1.0, size=None):
        return self.rng.gamma(shape, self.factor * np.asarray(scale), size)

    def random(self, size=None, dtype=np.float64, out=None):
        return self.rng.random(size, dtype=dtype) / self.factor

    def __getattr__(self, name):
        return getattr(self.rng, name)


class ReplayRNG:
    """A generator that hands out the standard-normal draw it made last time (plant: a draw reused).
    ``fresh()`` makes the next call draw anew."""

    def __init__(self, store: dict, key, rng, reuse: bool):
        self.store, self.key, self.rng, self.reuse = store, key, rng, reuse

    def standard_normal(self, size=None, dtype=np.float64):
        if self.reuse and self.key in self.store and np.shape(self.store[self.key]) == np.shape(np.empty(size or ())):
            return self.store[self.key]
        z = self.rng.standard_normal(size, dtype=dtype)
        self.store[self.key] = z
        return z

    def __getattr__(self, name):
        return getattr(self.rng, name)


class RepeatRNG:
    """A generator that repeats draws (plant: a draw reused). ``store`` is one party's, shared by the generators it
    is handed: each generator, at its first draw, takes the next number of that party's generators; an odd-numbered
    one returns, for its k-th call of a noise method (``standard_normal``, ``normal``, ``gamma``, ``random``) with a
    given shape, what the previous generator's k-th such call returned. A step gets a generator per round, so round
    2j + 1 reuses round 2j's draws (a Gaussian step multiplies them by its own σ: the reuse is rescaled); a fit that
    uses one generator throughout reuses the previous fit's."""

    def __init__(self, rng, store: dict):
        self.rng, self.store, self.calls, self.number = rng, store, {}, None

    def _draw(self, method: str, shape, make):
        if self.number is None:  # this generator's number among the party's, at its first draw
            self.number = self.store["count"] = self.store.get("count", -1) + 1
        key = (method, tuple(int(v) for v in np.atleast_1d(shape)) if shape is not None else ())
        k = self.calls[key] = self.calls.get(key, -1) + 1
        previous = self.store.get((self.number - 1, key, k))
        value = previous if self.number % 2 == 1 and previous is not None else make()
        self.store.pop((self.number - 2, key, k), None)  # keep one generator's draws back
        self.store[(self.number, key, k)] = value
        return np.copy(value)

    def standard_normal(self, size=None, dtype=np.float64, out=None):
        shape = size if out is None else out.shape
        z = self._draw("standard_normal", shape, lambda: np.asarray(self.rng.standard_normal(shape, dtype=dtype)))
        if out is None:
            return z if shape is not None else z[()]
        out[...] = z
        return out

    def normal(self, loc=0.0, scale=1.0, size=None):
        shape = size if size is not None else np.broadcast(np.asarray(loc), np.asarray(scale)).shape
        return np.asarray(loc) + np.asarray(scale) * self.standard_normal(shape)

    def gamma(self, shape, scale=1.0, size=None):
        g = self._draw("gamma", size, lambda: np.asarray(self.rng.gamma(shape, 1.0, size)))  # unit scale, rescaled
        return np.asarray(scale) * (g if size is not None else g[()])

    def random(self, size=None, dtype=np.float64, out=None):
        u = self._draw("random", size, lambda: np.asarray(self.rng.random(size, dtype=dtype)))
        return u if size is not None else float(u)

    def __getattr__(self, name):
        return getattr(self.rng, name)


# a generator plant for every party and the hub of an audited run (``dpadmm audit --plant``, the plant tests):
# a factory called once per audited fit, returning ``wrap(rng, who) -> rng``
_GENERATOR_PLANT: contextvars.ContextVar = contextvars.ContextVar("audit_generator_plant", default=None)


@contextlib.contextmanager
def planted_generators(factory: Callable[[], Callable[[Any, str], Any]]):
    """While active, every generator a party or the hub of an audited fit draws from is ``wrap(rng, who)``, ``wrap =
    factory()`` made afresh for each fit: the engine games (:func:`_engine_run`: every party's step and the hub's),
    the encrypted games' fits and randomized response's release. Not the process backend (its parties draw in
    their own processes) nor the whole-fit rows."""
    token = _GENERATOR_PLANT.set(factory)
    try:
        yield
    finally:
        _GENERATOR_PLANT.reset(token)


def generator_plant() -> Callable[[Any, str], Any] | None:
    """A fresh ``wrap(rng, who)`` of the active :func:`planted_generators` (None: none active)."""
    factory = _GENERATOR_PLANT.get()
    return None if factory is None else factory()


def plant_all(specs: list, hub, wrap):
    """Every party's step and the hub's step drawing from ``wrap(rng, who)``."""
    out = []
    for spec in specs:
        def step(cfg, state, inbox, *, rng, _real=spec.step, _who=spec.name):
            return _real(cfg, state, inbox, rng=wrap(rng, _who))
        out.append(dataclasses.replace(spec, step=step))
    if hub is not None and getattr(hub, "step", None) is not None:
        def hub_step(cfg, state, outboxes, *, rng, _real=hub.step):
            return _real(cfg, state, outboxes, rng=None if rng is None else wrap(rng, "hub"))
        hub = dataclasses.replace(hub, step=hub_step)
    return out, hub
