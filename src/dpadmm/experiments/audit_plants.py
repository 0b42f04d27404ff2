"""Planted bugs for the worst-case audit games: each wraps the real step of one party (its generator, a patched
library function while it steps, or the options it is set up with) or the hub's generator, for one run only —
the library itself is never edited. A plant maps ``(party specs, hub) -> (party specs, hub, context manager)``.
At the end, plants of every generator of a fit (:func:`~.audit_games.planted_generators`): ``dpadmm audit --plant``.
"""

from __future__ import annotations

import contextlib
import dataclasses
from unittest import mock

from .audit_games import RepeatRNG, ReplayRNG, ScaledRNG



def _wrap_step(specs: list, name: str, make_rng, around=None) -> list:
    """Party ``name``'s step with its generator replaced by ``make_rng(rng, inbox)`` (and the context
    ``around()`` active during the call)."""
    out = []
    for spec in specs:
        if spec.name != name:
            out.append(spec)
            continue
        real = spec.step

        def step(cfg, state, inbox, *, rng, _real=real):
            with (around() if around is not None else contextlib.nullcontext()):
                return _real(cfg, state, inbox, rng=make_rng(rng, inbox))

        out.append(dataclasses.replace(spec, step=step))
    return out


def plant_half(name: str):
    def plant(specs, hub):
        return _wrap_step(specs, name, lambda rng, inbox: ScaledRNG(rng, 0.5)), hub, contextlib.nullcontext()
    return plant


def plant_reuse_rounds(name: str):
    """The draw of every even call reused in the next (rescaled: the step multiplies by its own σ)."""
    def plant(specs, hub):
        store, count = {}, [0]

        def make(rng, inbox):
            count[0] += 1
            return ReplayRNG(store, name, rng, reuse=count[0] % 2 == 0)
        return _wrap_step(specs, name, make), hub, contextlib.nullcontext()
    return plant


def plant_reuse_round(name: str, source: int = 1, target: int = 2):
    """Round ``source``'s draw reused in round ``target`` of each fit (by the round number the party receives;
    rescaled: the step multiplies by its own σ) — a bug that fires once per fit, in every fit."""
    def plant(specs, hub):
        store: dict = {}

        def make(rng, inbox):
            t = getattr(inbox, "round", None)
            return ReplayRNG(store, name, rng, reuse=t == target) if t in (source, target) else rng
        return _wrap_step(specs, name, make), hub, contextlib.nullcontext()
    return plant


def plant_reuse_parties(first: str, second: str):
    """``second`` uses the draw ``first`` made in the same round (in-process: first steps first)."""
    def plant(specs, hub):
        store = {}
        specs = _wrap_step(specs, first, lambda rng, inbox: ReplayRNG(store, "round", rng, reuse=False))
        specs = _wrap_step(specs, second, lambda rng, inbox: ReplayRNG(store, "round", rng, reuse=True))
        return specs, hub, contextlib.nullcontext()
    return plant


def plant_patch(name: str, target, attr: str, value):
    """``target.attr`` replaced by ``value`` while party ``name`` steps."""
    def plant(specs, hub):
        return (_wrap_step(specs, name, lambda rng, inbox: rng, around=lambda: mock.patch.object(target, attr, value)),
                hub, contextlib.nullcontext())
    return plant


def plant_setup_option(name: str, **changes):
    """Party ``name`` set up with options the coordinator supplied (``changes`` merged into them)."""
    def plant(specs, hub):
        out = []
        for spec in specs:
            if spec.name == name:
                args = spec.setup
                if hasattr(args, "_fields"):  # a Setup record: its options field (a typed record or a mapping), by name
                    key = next(k for k in args._fields if isinstance(getattr(args, k), dict)
                               or (k == "options" and hasattr(getattr(args, k), "_fields")))
                    opts = getattr(args, key)
                    args = args._replace(**{key: opts._replace(**changes) if hasattr(opts, "_fields")
                                            else dict(opts, **changes)})
                else:  # a positional tuple (the deprecated form)
                    args = list(args)
                    i = next(j for j, a in enumerate(args) if isinstance(a, dict))
                    args[i] = dict(args[i], **changes)
                    args = tuple(args)
                spec = dataclasses.replace(spec, setup=args)
            out.append(spec)
        return out, hub, contextlib.nullcontext()
    return plant


def plant_hub_rng(make_rng):
    """The hub's generator replaced (the label mechanism draws at the coordinator)."""
    def plant(specs, hub):
        real = hub.step

        def step(cfg, state, outboxes, *, rng):
            return real(cfg, state, outboxes, rng=make_rng(rng))
        return specs, dataclasses.replace(hub, step=step), contextlib.nullcontext()
    return plant


# ----------------------------------------------------------------------------- every generator of a fit
def noise_times(factor: float):
    """A :func:`~.audit_games.planted_generators` factory: every noise draw times ``factor`` (a Gaussian's σ, a Gamma
    radius; a randomized-response flip probability)."""
    return lambda: (lambda rng, who: ScaledRNG(rng, factor))


def draws_reused():
    """A :func:`~.audit_games.planted_generators` factory: every party's every second generator repeats the draws of
    the one before (:class:`~.audit_rngs.RepeatRNG`): round 2j + 1 of a fit reuses round 2j's draws (the encrypted
    games, one generator per fit: fit 2j + 1 reuses fit 2j's)."""
    stores: dict = {}  # per party, over every fit the plant is active for (its generators' numbers carry on)
    return lambda: (lambda rng, who: RepeatRNG(rng, stores.setdefault(who, {})))


PLANT_HELP = "noise=F (every noise draw times F, e.g. noise=0.3) or reuse (each party's odd rounds repeat the draws of the round before)"


def parse_plant(text: str):
    """``dpadmm audit --plant``'s value as a factory; ValueError names the accepted forms."""
    key, _, value = text.strip().partition("=")
    if key == "reuse" and not value:
        return draws_reused()
    if key == "noise":
        try:
            factor = float(value)
        except ValueError:
            factor = float("nan")
        if 0.0 < factor < float("inf"):
            return noise_times(factor)
    raise ValueError(f"--plant {text!r} is not understood: use {PLANT_HELP}.")
